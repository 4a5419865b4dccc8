"""Several producers on one node: one shared sidecar beside one sidecar each.

    python perf/bench_node.py [--producers 2] [--steps 200] [--repeats 3] [--memory 1,2,4,8]

**Step time and per-call cost.** ``--producers`` processes train at once (each step:
four 256x256 matmuls on one BLAS thread, about 10 ms on a 2-core VM) and log after
every step 3 scalars and, every ``--histograms-every`` steps, 4 histograms of 10,000
values.  Three modes, interleaved
round by round (A B C A B C ...): ``none`` (the same loop, no writer), ``shared``
(``share_sidecar=True``, the default: one sidecar for all of them) and ``separate``
(``share_sidecar=False``: one sidecar each).  Each producer reports its mean step time
(``close()`` included, charged to the steps) and the p50 of its ``add_scalar`` calls;
one line per mode gives the medians over producers and repeats, the overhead over
``none`` in the same run, and the CPU the sidecar process(es) used per step (psutil,
read by the producers before ``close()``).

**Memory.** For each N in ``--memory``: N producers open a writer on one logdir, log a
scalar and a 100k-value histogram, flush, and wait; then the sidecar processes serving
that logdir are measured (RSS and USS, psutil) before the producers close.  One line per
N and mode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

from common import RESULT, emit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRODUCER = textwrap.dedent(
    """
    import json, os, sys, time
    import numpy as np
    mode, logdir, steps, gate, rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    every = int(sys.argv[6])
    rng = np.random.default_rng(rank)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    hists = [rng.standard_normal(10_000).astype(np.float32) for _ in range(4)]
    w = None
    if mode != "none":
        from mxsidecar import SidecarWriter
        w = SidecarWriter(logdir, share_sidecar=(mode == "shared"), ranks="all", rank=rank, world_size=64)
        w.flush()
    while not os.path.exists(gate):
        time.sleep(0.001)
    clock = time.perf_counter_ns
    calls = []
    t0 = time.perf_counter()
    for step in range(steps):
        x = a
        for _ in range(4):
            x = np.tanh(x @ a * 0.01)
        loss = float(x[0, 0])
        if w is not None:
            for k in range(3):
                c0 = clock()
                w.add_scalar(f"train/s{k}", loss + k, step)
                calls.append(clock() - c0)
            if step % every == 0:
                for k, h in enumerate(hists):
                    w.add_histogram(f"grad/h{k}", h, step)
    side = {}
    if w is not None:
        w.flush()
        side = w.stats()["sidecar"]
        w.close()
    total = time.perf_counter() - t0
    calls.sort()
    p50 = calls[len(calls) // 2] / 1000 if calls else 0.0
    out = {"step_ms": total / steps * 1000, "add_scalar_p50_us": p50}
    if side:
        out.update(sidecar_pid=w.stats()["sidecar_pid"], sidecar_cpu_s=side["cpu_seconds"])
    print("RESULT " + json.dumps(out), flush=True)
    """
)

HOLDER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from mxsidecar import SidecarWriter
    mode, logdir, rank, done = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    w = SidecarWriter(logdir, share_sidecar=(mode == "shared"), ranks="all", rank=rank, world_size=64)
    w.add_scalar("x", 1.0, 0)
    w.add_histogram("h", np.random.default_rng(rank).standard_normal(100_000), 0)
    w.flush()
    print("ready", flush=True)
    while not os.path.exists(done):
        time.sleep(0.01)
    w.close()
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return env


def run_round(mode: str, producers: int, steps: int, every: int = 1) -> list[dict[str, float]]:
    """``producers`` processes, started together through a gate file; their results."""
    with tempfile.TemporaryDirectory() as tmp:
        gate = os.path.join(tmp, "gate")
        logdir = os.path.join(tmp, "logs")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", PRODUCER, mode, logdir, str(steps), gate, str(k), str(every)],
                stdout=subprocess.PIPE,
                text=True,
                env=_env(),
            )
            for k in range(producers)
        ]
        time.sleep(1.5)  # every writer made and flushed before the gate opens (not a measurement)
        open(gate, "w").close()
        out = []
        for p in procs:
            stdout, _ = p.communicate(timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"producer failed ({p.returncode}): {stdout[-2000:]}")
            line = next(ln for ln in stdout.splitlines() if ln.startswith(RESULT))
            out.append(json.loads(line[len(RESULT) :]))
        return out


def sidecar_memory(mode: str, n: int) -> dict[str, Any]:
    import psutil

    with tempfile.TemporaryDirectory() as tmp:
        logdir, done = os.path.join(tmp, "logs"), os.path.join(tmp, "done")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", HOLDER, mode, logdir, str(k), done],
                stdout=subprocess.PIPE,
                text=True,
                env=_env(),
            )
            for k in range(n)
        ]
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            needle = "--logdir=" + json.dumps(logdir)[:-1]  # a private sidecar's logdir is logdir/rank_k
            rss = uss = 0
            count = 0
            for proc in psutil.process_iter(["cmdline"]):
                cmd = " ".join(proc.info["cmdline"] or [])
                if "mxsidecar.sidecar" in cmd and needle in cmd:
                    info = proc.memory_full_info()
                    rss += info.rss
                    uss += info.uss
                    count += 1
        finally:
            open(done, "w").close()
            for p in procs:
                p.communicate(timeout=120)
    return {"sidecars": count, "rss_mb": round(rss / 2**20, 1), "uss_mb": round(uss / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--histograms-every", type=int, default=1, help="steps between histograms (scalars: each step)")
    ap.add_argument("--memory", default="1,2,4,8", help="comma-separated producer counts ('' skips)")
    args = ap.parse_args()
    modes = ("none", "shared", "separate")
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.repeats):
        for mode in modes:
            results[mode].extend(run_round(mode, args.producers, args.steps, args.histograms_every))
    base = statistics.median(r["step_ms"] for r in results["none"])
    for mode in modes:
        step = statistics.median(r["step_ms"] for r in results[mode])
        line: dict[str, Any] = {
            "bench": "node_sidecar_steps",
            "mode": mode,
            "producers": args.producers,
            "steps": args.steps,
            "histograms_every": args.histograms_every,
            "repeats": args.repeats,
            "step_ms_median": round(step, 3),
            "overhead_pct": round((step / base - 1) * 100, 2),
        }
        if mode != "none":
            line["add_scalar_p50_us"] = round(statistics.median(r["add_scalar_p50_us"] for r in results[mode]), 2)
            # CPU of the sidecar process(es) per step of one producer: a shared sidecar's
            # seconds are reported by each of its producers (counted once), separate ones add up.
            per_round = [results[mode][i : i + args.producers] for i in range(0, len(results[mode]), args.producers)]
            cpu = [sum({r["sidecar_pid"]: r["sidecar_cpu_s"] for r in rnd}.values()) for rnd in per_round]
            line["sidecar_cpu_ms_per_step"] = round(statistics.median(cpu) / args.steps * 1000, 3)
        emit(line)
    for n in [int(x) for x in args.memory.split(",") if x]:
        for mode in ("shared", "separate"):
            emit({"bench": "node_sidecar_memory", "mode": mode, "producers": n, **sidecar_memory(mode, n)})


if __name__ == "__main__":
    main()
