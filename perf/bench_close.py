"""What ``close()`` costs: a fixed part, and the backlog the sidecar still has to write.

    python perf/bench_close.py [--runs 15] [--scalars 1000] [--histograms 64] [--quick]

One line per case and writer, medians over ``--runs`` runs, the cases interleaved
(every writer and case once per run) so machine noise hits them alike:

* ``idle_empty``: a writer started and flushed, nothing logged, idle 0.2 s, then closed;
* ``idle_written``: a few scalars logged and flushed (already in the file), idle 0.2 s,
  then closed: the fixed cost of close(), what issue 15 measured at ~70 ms;
* ``burst_scalars`` / ``burst_histograms``: K scalars / K histograms of 100,000 float32
  values logged back to back, then closed at once: close() drains the backlog;
* ``burst_scalars_loaded``: the same K scalars logged while every core is kept busy
  (one spinning process per core, stopped just before close): the sidecar runs under
  SCHED_IDLE, so while training has the CPU its backlog grows, and close() pays for it.

For mxsidecar each line also gives ``backlog_items`` (logged, not yet written by the
sidecar, just before close) and ``sidecar_cpu_ms_in_close``: the sidecar's CPU time from
the call of close() to its exit: its whole life's CPU time (the reaped child's
``getrusage(RUSAGE_CHILDREN)``, after close) less what it had used before close
(``/proc/<pid>/schedstat``, psutil elsewhere).  tensorboardX (optional: ``pip install
tensorboardX``) runs the same cases; its close() writes what its thread still holds,
without an fsync, where mxsidecar's close() fsyncs every file before it returns.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

from common import emit, percentile  # noqa: E402

__all__ = ["CASES", "run"]

CASES = ("idle_empty", "idle_written", "burst_scalars", "burst_histograms", "burst_scalars_loaded")
HIST_VALUES = 100_000
IDLE_SECS = 0.2  # untimed, between the last flush and close() in the idle cases


def _mxsidecar(logdir: str) -> Any:
    from mxsidecar import SidecarWriter

    return SidecarWriter(logdir, slab_mb=64)


def _tensorboardx(logdir: str) -> Any:
    from tensorboardX import SummaryWriter

    return SummaryWriter(logdir)


WRITERS: dict[str, Callable[[str], Any]] = {"mxsidecar": _mxsidecar, "tensorboardX": _tensorboardx}


class _Load:
    """One spinning process per core, for as long as the context lasts: training that
    keeps every core busy, so a SCHED_IDLE sidecar barely runs."""

    def __enter__(self) -> _Load:
        spin = "while True: pass"
        self.procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
        time.sleep(0.05)  # let them get going
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def _sidecar_cpu_s(w: Any) -> float:
    """The sidecar's CPU seconds so far (mxsidecar only).  The scheduler's own count
    (``/proc/<pid>/schedstat``, ns) where there is one: psutil's ``cpu_times`` come in
    clock ticks (10 ms), as large as what is measured here."""
    pid = w._pipe.supervisor.pid
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        import psutil

        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _once(name: str, case: str, scalars: int, histograms: int) -> dict[str, float]:
    import numpy as np

    rng = np.random.default_rng(0)
    hist = rng.standard_normal(HIST_VALUES).astype(np.float32)
    with tempfile.TemporaryDirectory() as logdir:
        w = WRITERS[name](logdir)
        w.add_scalar("warmup", 0.0, 0)
        w.flush()  # started: the sidecar's Python start-up is not what is measured
        if case == "idle_written":
            for i in range(5):
                w.add_scalar("loss", 1.0 / (i + 1), i)
            w.flush()
        if case.startswith("idle"):
            time.sleep(IDLE_SECS)  # the end of a run: the sidecar has been waiting in select()
        elif case == "burst_scalars":
            for i in range(scalars):
                w.add_scalar("loss", 1.0 / (i + 1), i)
        elif case == "burst_histograms":
            for i in range(histograms):
                w.add_histogram("weights", hist, i)
        elif case == "burst_scalars_loaded":
            with _Load():
                for i in range(scalars):
                    w.add_scalar("loss", 1.0 / (i + 1), i)
        out: dict[str, float] = {}
        if name == "mxsidecar":
            pipe = w._pipe
            out["backlog_items"] = pipe._seq - pipe._done
            cpu_before = _sidecar_cpu_s(w)
            children_before = _children_cpu_s()
        t0 = time.perf_counter()
        w.close()
        out["close_ms"] = (time.perf_counter() - t0) * 1e3
        if name == "mxsidecar":
            # The reaped sidecar's whole CPU time lands in RUSAGE_CHILDREN at once; what
            # it had used before close() is known, so the difference is close()'s part.
            life = _children_cpu_s() - children_before
            out["sidecar_cpu_ms_in_close"] = max(0.0, life - cpu_before) * 1e3
        return out


def run(runs: int = 15, scalars: int = 1000, histograms: int = 64) -> list[dict[str, Any]]:
    writers = list(WRITERS)
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        writers.remove("tensorboardX")
        emit({"bench": "close", "writer": "tensorboardX", "skipped": "not installed (pip install tensorboardX)"})
    results: dict[tuple[str, str], list[dict[str, float]]] = {(w, c): [] for w in writers for c in CASES}
    for _ in range(runs):
        for case in CASES:
            for name in writers:
                results[name, case].append(_once(name, case, scalars, histograms))
    records = []
    for (name, case), rs in results.items():
        close = sorted(r["close_ms"] for r in rs)
        rec: dict[str, Any] = {
            "bench": "close",
            "writer": name,
            "case": case,
            "runs": len(rs),
            "close_ms_p50": round(percentile(close, 50), 2),
            "close_ms_p90": round(percentile(close, 90), 2),
            "close_ms_max": round(close[-1], 2),
        }
        if case.startswith("burst"):
            rec["k"] = histograms if case == "burst_histograms" else scalars
        if name == "mxsidecar":
            rec["backlog_items_p50"] = statistics.median(r["backlog_items"] for r in rs)
            rec["sidecar_cpu_ms_in_close_p50"] = round(statistics.median(r["sidecar_cpu_ms_in_close"] for r in rs), 2)
        emit(rec)
        records.append(rec)
    return records


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--scalars", type=int, default=1000, help="K, scalars per burst")
    p.add_argument("--histograms", type=int, default=64, help="K, histograms per burst")
    p.add_argument("--quick", action="store_true", help="3 runs (a smoke run)")
    a = p.parse_args()
    run(runs=3 if a.quick else a.runs, scalars=a.scalars, histograms=a.histograms)
