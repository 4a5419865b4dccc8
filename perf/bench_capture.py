"""Caller cost of logging NDArrays whose computation is still pending on MXNet's engine.

Like a training loop: each iteration pushes a computation (a 300x300 ``dot``, untimed)
and logs a value that depends on it (timed), so every call meets a value still being
computed; the engine is drained (untimed) every 10 iterations, as a loop's own
``asscalar()`` for a progress print would.  mxsidecar pushes an engine copy and
returns; tensorboardX needs host values, so its caller does ``asscalar()`` /
``asnumpy()`` first and pays the remaining compute plus the encoding.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from common import emit, percentile

__all__ = ["run"]


def _time_pending(make: Callable[[int], Any], call: Callable[[Any, int], Any], n: int) -> dict[str, float]:
    import mxnet as mx

    samples = []
    for i in range(n):
        value = make(i)  # pushed on the engine, not yet computed
        t0 = time.perf_counter_ns()
        call(value, i)
        samples.append(time.perf_counter_ns() - t0)
        if i % 10 == 9:
            mx.nd.waitall()
    s = sorted(samples)
    return {"p50_us": percentile(s, 50) / 1e3, "p90_us": percentile(s, 90) / 1e3, "p99_us": percentile(s, 99) / 1e3}


def run(n: int = 200, repeats: int = 3) -> list[dict[str, Any]]:
    import mxnet as mx

    a = mx.nd.random.uniform(shape=(300, 300))
    big = mx.nd.random.uniform(shape=(1000, 1000))
    mx.nd.waitall()
    t0 = time.perf_counter()
    for _ in range(50):
        mx.nd.dot(a, a).wait_to_read()
    compute_us = (time.perf_counter() - t0) / 50 * 1e6
    emit(
        {
            "bench": "pending_compute",
            "what": "dot 300x300 (what each logged value waits on)",
            "us": round(compute_us, 1),
        }
    )

    def pending_scalar(i: int) -> Any:
        return mx.nd.dot(a, a)[0:1, 0]

    def pending_big(i: int) -> Any:
        return big + mx.nd.dot(a, a)[0, 0]

    from mxsidecar import SidecarWriter

    cases: dict[str, dict[str, Callable[[Any], Any]]] = {
        "add_scalar_pending_ndarray": {
            "mxsidecar": lambda w: lambda v, i: w.add_scalar("loss", v, i),
            "tensorboardX": lambda w: lambda v, i: w.add_scalar("loss", v.asscalar(), i),
        },
        "add_histogram_1M_ndarray": {
            "mxsidecar": lambda w: lambda v, i: w.add_histogram("w", v, i),
            "tensorboardX": lambda w: lambda v, i: w.add_histogram("w", v.asnumpy(), i),
        },
    }
    makers = {"add_scalar_pending_ndarray": pending_scalar, "add_histogram_1M_ndarray": pending_big}
    records = []
    for bench, writers in cases.items():
        results: dict[str, list[dict[str, float]]] = {name: [] for name in writers}
        for _ in range(repeats):
            for name, bind in writers.items():
                with tempfile.TemporaryDirectory() as logdir:
                    if name == "mxsidecar":
                        w = SidecarWriter(logdir)
                        w.flush()  # the sidecar is up: startup is not what this measures
                    else:
                        try:
                            from tensorboardX import SummaryWriter
                        except ImportError:
                            continue
                        w = SummaryWriter(logdir)
                    results[name].append(_time_pending(makers[bench], bind(w), n))
                    w.close()
        for name, runs in results.items():
            if not runs:
                continue
            rec: dict[str, Any] = {"bench": bench, "writer": name, "n": n, "repeats": len(runs)}
            for key in ("p50_us", "p90_us", "p99_us"):
                rec[key] = round(statistics.median(r[key] for r in runs), 2)
            emit(rec)
            records.append(rec)
    return records


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run()
