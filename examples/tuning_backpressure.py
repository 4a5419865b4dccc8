"""Choose max_queue, slab_mb and on_full: a demo with a sidecar that cannot keep up.

    python examples/tuning_backpressure.py [--quick] [--slow-ms 2.0]

A simulated training loop (each step sleeps ``--step-ms``, standing for its compute)
logs a realistic mix: the loss every step, histograms of four 64k-value weight
tensors every 5th step (a burst of four 256 KB arrays), and a batch of eight
3x32x32 images every 25th step.  The sidecar is slowed on purpose by mxsidecar's
failure-injection hook (``MXSIDECAR_FAULTS``, see ``mxsidecar/sidecar/faults.py``: a sleep
before each item is encoded), set only while each demo writer is created (the
sidecar inherits it; your own writers never see it), standing for a slow network
file system or a CPU shared with data loading.  Two scenarios: "bursty", where the
sidecar keeps up on average but not within a burst, and "too slow" (``--slow-ms``
per item), where it handles fewer items per second than the loop logs.  For each
setting of max_queue / slab_mb / on_full: seconds the loop spent blocked, items
dropped, the mean and p99 cost of an ``add_*`` call, the loop's time, ``close()``'s
time (which writes what is still queued) and the wall time.  Logs go to a temporary
directory, removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout too

from mxsidecar import SidecarWriter

FAULTS_ENV = "MXSIDECAR_FAULTS"

BURSTY_MS = 0.2  # the "bursty" sidecar's delay per item: it keeps up on average

# (scenario, setting, the sidecar's delay per item in ms or None for --slow-ms, writer arguments)
SETTINGS: list[tuple[str, str, float | None, dict[str, Any]]] = [
    ("bursty", "too small for a burst", BURSTY_MS, {"max_queue": 2, "slab_mb": 0.5, "on_full": "block"}),
    ("bursty", "sized for a burst", BURSTY_MS, {"max_queue": 64, "slab_mb": 4, "on_full": "block"}),
    ("too slow", "block", None, {"max_queue": 64, "slab_mb": 8, "on_full": "block"}),
    ("too slow", "drop", None, {"max_queue": 64, "slab_mb": 8, "on_full": "drop"}),
    ("too slow", "drop, small slab", None, {"max_queue": 4096, "slab_mb": 1, "on_full": "drop"}),
    ("too slow", "whole run fits", None, {"max_queue": 8192, "slab_mb": 256, "on_full": "block"}),
]

CHOOSING = """\
How to read it, and how to choose.  max_queue and slab_mb are shock absorbers: they
hide *bursts* (all the histograms of one step, an image batch) from a sidecar that
keeps up on average.  In the "bursty" rows, 2 items and half a megabyte make every
burst wait for the sidecar; 64 items and 4 MB (a burst is 5 items and 1 MB) never
wait.  So size max_queue for the items of your largest burst and slab_mb for its
bytes, with room to spare.  Against a sidecar that is slower *on average* (the "too
slow" rows; in your own run, stats()['queued'] stays near max_queue and
stats()['blocked_seconds'] grows step after step) no buffer is big enough: "whole run
fits" never blocks, but close() then pays the whole backlog, memory grows with the
run (slab_mb lives in /dev/shm, 64 MB in all by default in a Docker container), and
every fresh page of a big slab is faulted in on first use.  Then pick the policy:
on_full='block' (the default) loses nothing and runs training at the sidecar's pace,
right for a research run where every point matters; on_full='drop' keeps training at
full speed and drops the excess, counted per kind and tag in
stats()['dropped_by_tag'] and warned about once at close, right for long runs whose
heavy diagnostics are optional.  With a small slab and a large queue the big arrays
are dropped first while scalars still get through.  Better still: log less (the
histograms every N steps), give the sidecar a core of its own (cpu_affinity=[...]) or
its full priority (nice=0), and watch stats(), or pass stats_secs=60 to log these
counters as mxsidecar/* scalars next to your own.
"""


@contextmanager
def slowed_sidecar(slow_ms: float) -> Iterator[None]:
    """The fault hook in the environment while a writer (so its sidecar) is created."""
    old = os.environ.get(FAULTS_ENV)
    os.environ[FAULTS_ENV] = json.dumps([{"at": "encode", "action": "sleep", "seconds": slow_ms / 1e3}])
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(FAULTS_ENV, None)
        else:
            os.environ[FAULTS_ENV] = old


def train(settings: dict[str, Any], steps: int, step_ms: float, slow_ms: float) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    weights = {f"layer{k}/weight": rng.standard_normal(64 * 1024).astype(np.float32) for k in range(4)}
    images = rng.random((8, 3, 32, 32)).astype(np.float32)
    calls: list[int] = []
    clock = time.perf_counter_ns
    with tempfile.TemporaryDirectory() as logdir:
        with slowed_sidecar(slow_ms):
            sw = SidecarWriter(logdir, block_timeout=None, **settings)
        sw.flush()  # the sidecar is up: its startup is not part of the comparison
        start = time.perf_counter()
        due = start
        for step in range(steps):
            due += step_ms / 1e3
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)  # the step's compute
            else:
                due = time.perf_counter()  # we were held up: no catch-up burst
            t0 = clock()
            sw.add_scalar("train/loss", 1.0 / (step + 1), step)
            calls.append(clock() - t0)
            if step % 5 == 0:
                for tag, w in weights.items():
                    t0 = clock()
                    sw.add_histogram(tag, w, step)
                    calls.append(clock() - t0)
            if step % 25 == 0:
                t0 = clock()
                sw.add_images("train/inputs", images, step)
                calls.append(clock() - t0)
        loop_s = time.perf_counter() - start
        stats = sw.stats()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the drop warning: counted in the table instead
            sw.close()
        wall_s = time.perf_counter() - start
    s = sorted(calls)
    return {
        "blocked_s": stats["blocked_seconds"],
        "dropped": stats["dropped"],
        "mean_call_us": sum(s) / len(s) / 1e3,
        "p99_call_us": s[min(len(s) - 1, round(0.99 * (len(s) - 1)))] / 1e3,
        "loop_s": loop_s,
        "close_s": wall_s - loop_s,
        "wall_s": wall_s,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer steps (finishes in well under 20 s)")
    p.add_argument("--steps", type=int, default=None, help="steps per setting (default 1000, --quick 250)")
    p.add_argument("--step-ms", type=float, default=2.0, help="simulated compute per step")
    p.add_argument("--slow-ms", type=float, default=2.0, help="the 'too slow' sidecar's delay per item")
    args = p.parse_args()
    steps = args.steps or (250 if args.quick else 1000)

    per_step = 1 + 4 / 5 + 1 / 25
    rate = per_step * 1e3 / args.step_ms
    print(
        f"{steps} steps of {args.step_ms:g} ms (the loop alone: {steps * args.step_ms / 1e3:.2f} s), logging "
        f"{per_step:.2f} items per step on average ({rate:.0f}/s), in bursts: 6 items every 5th step.\n"
        f"bursty: the sidecar is slowed by {BURSTY_MS:g} ms per item: it keeps up on average, not within a burst.\n"
        f"too slow: it is slowed by {args.slow_ms:g} ms per item (under {1e3 / args.slow_ms:.0f}/s): "
        "it cannot keep up.\n"
    )
    header = "| scenario | setting | max_queue | slab_mb | on_full | blocked s | dropped scalar/hist/image "
    header += "| mean call µs | p99 call µs | loop s | close s | wall s |"
    print(header)
    print("|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|")
    for scenario, name, slow_ms, settings in SETTINGS:
        r = train(settings, steps, args.step_ms, args.slow_ms if slow_ms is None else slow_ms)
        d = r["dropped"]
        dropped = f"{d.get('scalar', 0)}/{d.get('histogram', 0)}/{d.get('image', 0)}"
        print(
            f"| {scenario} | {name} | {settings['max_queue']} | {settings['slab_mb']:g} | {settings['on_full']} "
            f"| {r['blocked_s']:.2f} | {dropped} | {r['mean_call_us']:.1f} | {r['p99_call_us']:.1f} "
            f"| {r['loop_s']:.2f} | {r['close_s']:.2f} | {r['wall_s']:.2f} |",
            flush=True,
        )
    print("\n" + CHOOSING)


if __name__ == "__main__":
    main()
