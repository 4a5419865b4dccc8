"""Caller cost of ``add_scalar(float)``: mxsidecar beside tensorboardX, same process, interleaved.

Each repeat times N calls one by one (perf_counter_ns around each call) and then the
writer's close, for every writer in turn (A B A B ...); the figures are the medians
over repeats.  ``mean_incl_close_us`` charges the time close() takes to the calls, so
a writer that defers its work cannot hide it.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from typing import Any

from common import emit, time_calls

__all__ = ["WRITERS", "run"]


def _mxsidecar(logdir: str) -> Any:
    from mxsidecar import SidecarWriter

    return SidecarWriter(logdir)


def _tensorboardx(logdir: str) -> Any:
    from tensorboardX import SummaryWriter

    return SummaryWriter(logdir)


WRITERS: dict[str, Callable[[str], Any]] = {"mxsidecar": _mxsidecar, "tensorboardX": _tensorboardx}


def run(n: int = 20000, repeats: int = 3) -> list[dict[str, Any]]:
    per_writer: dict[str, list[dict[str, float]]] = {name: [] for name in WRITERS}
    skipped: set[str] = set()
    values = [1.0 / (i + 1) for i in range(n)]
    for _ in range(repeats):
        for name, make in WRITERS.items():
            if name in skipped:
                continue
            with tempfile.TemporaryDirectory() as logdir:
                try:
                    w = make(logdir)
                except ImportError as exc:
                    emit({"bench": "add_scalar_float", "writer": name, "skipped": str(exc)})
                    skipped.add(name)
                    continue
                log = w.add_scalar
                per_writer[name].append(time_calls(lambda i, log=log: log("loss", values[i], i), n, w.close))
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


if __name__ == "__main__":
    run()
