"""Caller cost of ``add_scalar(float)``: mxsidecar beside tensorboardX, the inline writer
and mxboard, interleaved.

Each repeat times N calls one by one (perf_counter_ns around each call) and then the
writer's close, for every writer in turn (A B A B ...); the figures are the medians
over repeats.  ``mean_incl_close_us`` charges the time close() takes to the calls, so
a writer that defers its work cannot hide it.  mxboard runs in its own environment
(``mxboard_env``), one worker process per repeat, in the same schedule.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from typing import Any

from common import emit, interleave, time_calls, worker_result

__all__ = ["WRITERS", "run"]


def _mxsidecar(logdir: str) -> Any:
    from mxsidecar import SidecarWriter

    return SidecarWriter(logdir)


def _tensorboardx(logdir: str) -> Any:
    from tensorboardX import SummaryWriter

    return SummaryWriter(logdir)


def _inline(logdir: str) -> Any:
    from inline_writer import InlineWriter

    return InlineWriter(logdir)


def _mxboard(logdir: str) -> Any:
    from mxboard import SummaryWriter

    return SummaryWriter(logdir)


WRITERS: dict[str, Callable[[str], Any]] = {
    "mxsidecar": _mxsidecar,
    "tensorboardX": _tensorboardx,
    "inline": _inline,
    "mxboard": _mxboard,
}


def _once(name: str, n: int) -> dict[str, float]:
    """One timed run: n calls, then close (the writer is started and flushed first:
    mxsidecar's sidecar takes a Python start-up, which is not what this measures)."""
    values = [1.0 / (i + 1) for i in range(n)]
    with tempfile.TemporaryDirectory() as logdir:
        w = WRITERS[name](logdir)
        w.flush()
        log = w.add_scalar
        return time_calls(lambda i: log("loss", values[i], i), n, w.close)


def run(n: int = 20000, repeats: int = 3, writers: tuple[str, ...] = tuple(WRITERS)) -> list[dict[str, Any]]:
    per_writer = interleave("add_scalar_float", writers, repeats, "bench_scalar", _once, lambda name: (name, n))
    records = []
    for name, runs in per_writer.items():
        if not runs:
            continue
        rec: dict[str, Any] = {"bench": "add_scalar_float", "writer": name, "repeats": len(runs), "n": n}
        for key in ("p50_us", "p90_us", "p99_us", "mean_us", "mean_incl_close_us", "close_ms"):
            rec[key] = round(statistics.median(r[key] for r in runs), 3)
        emit(rec)
        records.append(rec)
    return records


def caller_float(n: int = 20000, repeats: int = 5) -> dict[str, Any]:
    """``add_scalar(float)`` alone: the caller's own cost, with a queue that never fills
    (``max_queue`` > n), so no call waits for the sidecar; the medians over repeats of
    each run's p50 and p90 (``python perf/bench_scalar.py --caller``)."""
    from mxsidecar import SidecarWriter

    values = [1.0 / (i + 1) for i in range(n)]
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as logdir:
            w = SidecarWriter(logdir, max_queue=n + 16)
            w.flush()
            runs.append(time_calls(lambda i, log=w.add_scalar: log("loss", values[i], i), n, w.close))
    rec: dict[str, Any] = {"bench": "add_scalar_float_caller", "writer": "mxsidecar", "repeats": repeats, "n": n}
    for key in ("p50_us", "p90_us", "p99_us", "mean_us"):
        rec[key] = round(statistics.median(r[key] for r in runs), 3)
    rec["p50_us_runs"] = [round(r["p50_us"], 3) for r in runs]
    emit(rec)
    return rec


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--worker"]:  # mxboard_env.run_worker: one run of one writer
        worker_result(_once(sys.argv[2], int(sys.argv[3])))
    else:
        import os

        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if sys.argv[1:2] == ["--caller"]:
            caller_float()
        else:
            run()
