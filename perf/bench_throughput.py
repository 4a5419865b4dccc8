"""Sustained end-to-end throughput of float scalars, and the memory of both processes.

    python perf/bench_throughput.py [--n 1000000] [--repeats 3] [--histograms 10000]
                                    [--tree DIR ...] [--writers mxsidecar tensorboardX inline]

**`throughput_scalars`**: ``n`` calls of ``add_scalar('loss', float, step)`` back to back
with the writer's *default* settings (for mxsidecar: ``max_queue=1024``,
``on_full='block'``, a SCHED_IDLE sidecar), timed from the first call to the return of
``close()``: ``scalars_per_s`` is what the whole pipeline sustains, the sidecar's drain
included (the queue fills within the first millisecond, and the caller then waits for
the sidecar, by design).  The writer is created and flushed first, untimed.  For
mxsidecar the same run samples the RSS of the training process and of the sidecar
(psutil) at the start, the middle and the end of the loop (``rss_mb``), and the
sidecar's CPU seconds per million scalars (``sidecar_cpu_s_per_M``, from
``/proc/<pid>/stat`` just before close; close's own drain is not in it).

**`memory_histograms`**: ``--histograms`` numpy histograms of 1,000 float32 values,
back to back (default settings), RSS of both processes at start, middle and end.

Every writer (and every ``--tree``: another checkout's ``mxsidecar``, e.g. the commit
before a change) runs in a child process of its own, in turn (A B A B ...), and each
figure is the median over ``--repeats``.  tensorboardX and the inline writer do the
same calls (``n`` capped at 200,000 for them: their rate is flat in ``n``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from common import emit  # noqa: E402

OTHER_WRITERS_MAX_N = 200_000


def _rss_mb(proc: Any) -> float:
    return round(proc.memory_info().rss / 2**20, 1)


def _cpu_s(proc: Any) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def _writer(name: str, logdir: str) -> Any:
    if name == "mxsidecar":
        from mxsidecar import SidecarWriter

        return SidecarWriter(logdir)
    if name == "tensorboardX":
        from tensorboardX import SummaryWriter

        return SummaryWriter(logdir)
    from inline_writer import InlineWriter

    return InlineWriter(logdir)


def scalars_once(name: str, n: int) -> dict[str, Any]:
    """One timed run in this process."""
    import psutil

    values = [1.0 / (i + 1) for i in range(n)]
    me = psutil.Process()
    with tempfile.TemporaryDirectory() as logdir:
        w = _writer(name, logdir)
        w.flush()
        side = psutil.Process(w.stats()["sidecar_pid"]) if name == "mxsidecar" else None
        rss: dict[str, list[float]] = {"trainer": [_rss_mb(me)]}
        if side is not None:
            rss["sidecar"] = [_rss_mb(side)]
            side_cpu0 = _cpu_s(side)
        log = w.add_scalar
        mid = n // 2
        t0 = time.perf_counter()
        for i in range(mid):
            log("loss", values[i], i)
        rss["trainer"].append(_rss_mb(me))
        if side is not None:
            rss["sidecar"].append(_rss_mb(side))
        for i in range(mid, n):
            log("loss", values[i], i)
        rss["trainer"].append(_rss_mb(me))
        if side is not None:
            rss["sidecar"].append(_rss_mb(side))
            side_cpu = _cpu_s(side) - side_cpu0
        w.close()
        elapsed = time.perf_counter() - t0
    rec: dict[str, Any] = {"scalars_per_s": n / elapsed, "seconds": elapsed}
    if side is not None:
        rec["rss_mb"] = rss
        rec["sidecar_cpu_s_per_M"] = side_cpu / n * 1e6
    return rec


def histograms_once(k: int) -> dict[str, Any]:
    import numpy as np
    import psutil

    from mxsidecar import SidecarWriter

    me = psutil.Process()
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    with tempfile.TemporaryDirectory() as logdir:
        w = SidecarWriter(logdir)
        w.flush()
        side = psutil.Process(w.stats()["sidecar_pid"])
        rss: dict[str, list[float]] = {"trainer": [_rss_mb(me)], "sidecar": [_rss_mb(side)]}
        t0 = time.perf_counter()
        for i in range(k):
            w.add_histogram("h", values, i)
            if i in (k // 2, k - 1):
                w.flush()  # what is queued is not growth: sample once it is written
                rss["trainer"].append(_rss_mb(me))
                rss["sidecar"].append(_rss_mb(side))
        w.close()
        elapsed = time.perf_counter() - t0
    return {"histograms_per_s": k / elapsed, "rss_mb": rss}


def _child(tree: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", *args]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=tree)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _median_rss(runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    procs = runs[0]["rss_mb"].keys()
    return {p: [statistics.median(r["rss_mb"][p][j] for r in runs) for j in range(3)] for p in procs}


def run(n: int, repeats: int, histograms: int, trees: list[str], writers: list[str]) -> list[dict[str, Any]]:
    cases: list[tuple[str, str, int]] = []  # (writer, tree, n)
    for tree in trees:
        cases.append(("mxsidecar", tree, n))
    for name in writers:
        if name != "mxsidecar":
            cases.append((name, trees[0], min(n, OTHER_WRITERS_MAX_N)))
    results: dict[tuple[str, str], list[dict[str, Any]]] = {(w, t): [] for w, t, _ in cases}
    hist: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    for _ in range(repeats):
        for name, tree, k in cases:
            results[(name, tree)].append(_child(tree, "scalars", name, str(k)))
        if histograms:
            for tree in trees:
                hist[tree].append(_child(tree, "histograms", str(histograms)))
    records = []
    for name, tree, k in cases:
        runs = [r for r in results[(name, tree)] if "error" not in r]
        rec: dict[str, Any] = {"bench": "throughput_scalars", "writer": name, "n": k, "repeats": len(runs)}
        if len(trees) > 1 and name == "mxsidecar":
            rec["tree"] = tree
        if not runs:
            rec["error"] = results[(name, tree)][0]["error"]
        else:
            rec["scalars_per_s"] = round(statistics.median(r["scalars_per_s"] for r in runs))
            rec["scalars_per_s_runs"] = [round(r["scalars_per_s"]) for r in runs]
            if "rss_mb" in runs[0]:
                rec["sidecar_cpu_s_per_M"] = round(statistics.median(r["sidecar_cpu_s_per_M"] for r in runs), 3)
                rec["rss_mb"] = _median_rss(runs)
        emit(rec)
        records.append(rec)
    for tree in trees if histograms else []:
        runs = [r for r in hist[tree] if "error" not in r]
        rec = {"bench": "memory_histograms", "writer": "mxsidecar", "n": histograms, "repeats": len(runs)}
        if len(trees) > 1:
            rec["tree"] = tree
        if not runs:
            rec["error"] = hist[tree][0]["error"]
        else:
            rec["histograms_per_s"] = round(statistics.median(r["histograms_per_s"] for r in runs))
            rec["rss_mb"] = _median_rss(runs)
        emit(rec)
        records.append(rec)
    return records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--histograms", type=int, default=10_000)
    p.add_argument("--tree", nargs="*", default=[ROOT], help="checkouts whose mxsidecar to measure, interleaved")
    p.add_argument("--writers", nargs="*", default=["mxsidecar", "tensorboardX", "inline"])
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        what, *rest = args.child
        result = scalars_once(rest[0], int(rest[1])) if what == "scalars" else histograms_once(int(rest[0]))
        print(json.dumps(result), flush=True)
        return
    run(args.n, args.repeats, args.histograms, [os.path.abspath(t) for t in args.tree], args.writers)


if __name__ == "__main__":
    main()
