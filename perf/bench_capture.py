"""Caller cost of logging NDArrays whose computation is still pending on MXNet's engine.

Like a training loop: each iteration pushes a computation (a 300x300 ``dot``, untimed)
and logs a value that depends on it (timed), so every call meets a value still being
computed; every 10 iterations the engine is drained and the writer flushed (untimed:
a loop's own ``asscalar()`` for a progress print, and a sidecar that keeps up), so the
percentiles are the training thread's cost, not the sidecar's throughput.
``mean_incl_close_us`` charges the calls, the flushes and ``close()`` to the calls.
mxsidecar pushes an engine copy and returns; tensorboardX needs host values, so its
caller does ``asscalar()`` / ``asnumpy()`` first and pays the remaining compute plus
the encoding; the inline writer and mxboard take the NDArray and do the same inside
(but mxboard's scalars need ``asscalar()`` from the caller too).
mxboard runs in its own environment (``mxboard_env``), one worker per repeat.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench_scalar import WRITERS
from common import emit, interleave, percentile, time_flushed, worker_result

__all__ = ["CASES", "run"]

# case -> writer -> the call; a writer missing here takes the NDArray as it is
CASES: dict[str, dict[str, Callable[[Any, Any, int], Any]]] = {
    "add_scalar_pending_ndarray": {
        "": lambda w, v, i: w.add_scalar("loss", v, i),
        "tensorboardX": lambda w, v, i: w.add_scalar("loss", v.asscalar(), i),
        # mxboard 0.1.0 encodes an NDArray scalar, then fails on float(NDArray) for its
        # scalar dict: its users call asscalar() first
        "mxboard": lambda w, v, i: w.add_scalar("loss", v.asscalar(), i),
    },
    "add_histogram_1M_ndarray": {
        "": lambda w, v, i: w.add_histogram("w", v, i),
        "tensorboardX": lambda w, v, i: w.add_histogram("w", v.asnumpy(), i),
    },
}


def _once(case: str, name: str, n: int) -> dict[str, float]:
    """One writer's timed run of ``case``: n calls on pending values, then close."""
    import mxnet as mx

    a = mx.nd.random.uniform(shape=(300, 300))
    big = mx.nd.random.uniform(shape=(1000, 1000))
    if case == "add_scalar_pending_ndarray":

        def make(i: int) -> Any:
            return mx.nd.dot(a, a)[0:1, 0]

    else:

        def make(i: int) -> Any:
            return big + mx.nd.dot(a, a)[0, 0]

    call = CASES[case].get(name, CASES[case][""])
    with tempfile.TemporaryDirectory() as logdir:
        w = WRITERS[name](logdir)
        # make(i) is pushed on the engine, not yet computed, when the call is timed
        r = time_flushed(w, lambda value, i: call(w, value, i), n, prepare=make, settle=mx.nd.waitall)
    s = sorted(r["samples"])
    return {
        "p50_us": percentile(s, 50) / 1e3,
        "p90_us": percentile(s, 90) / 1e3,
        "p99_us": percentile(s, 99) / 1e3,
        "mean_incl_close_us": r["charged_ns"] / n / 1e3,
    }


def _pending_compute_us() -> float:
    import mxnet as mx

    a = mx.nd.random.uniform(shape=(300, 300))
    mx.nd.waitall()
    t0 = time.perf_counter()
    for _ in range(50):
        mx.nd.dot(a, a).wait_to_read()
    return (time.perf_counter() - t0) / 50 * 1e6


def run(n: int = 200, repeats: int = 3, writers: tuple[str, ...] = tuple(WRITERS)) -> list[dict[str, Any]]:
    emit({"bench": "pending_compute", "what": "dot 300x300 (what each logged value waits on)",
          "us": round(_pending_compute_us(), 1)})  # fmt: skip
    records = []
    skipped: set[str] = set()
    for case in CASES:

        def args(name: str, case: str = case) -> tuple[str, str, int]:
            return case, name, n

        results = interleave(case, writers, repeats, "bench_capture", _once, args, skipped)
        for name, runs in results.items():
            if not runs:
                continue
            rec: dict[str, Any] = {"bench": case, "writer": name, "n": n, "repeats": len(runs)}
            for key in ("p50_us", "p90_us", "p99_us", "mean_incl_close_us"):
                rec[key] = round(statistics.median(r[key] for r in runs), 2)
            emit(rec)
            records.append(rec)
    return records


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--worker"]:  # mxboard_env.run_worker: one run of one writer
        worker_result(_once(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        import os

        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        run()
