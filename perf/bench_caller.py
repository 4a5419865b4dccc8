"""The caller's cost of logging NDArrays, with MXNet's engine busy and idle, as a ratio to
the floor: a bare engine push of the same array measured in the same loop.

    python perf/bench_caller.py [--n 150] [--quick]

A training script logs right after ``trainer.step()``, while the engine still computes
on every core; that is where the caller's cost counts (``bench_capture.py`` logs into
an idle engine).  Each iteration, for each condition:

* **busy**: four 384x384 ``dot``s are pushed just before the call (untimed), and the
  logged value depends on them, so it is still pending when the call is made;
* **idle**: the engine is drained (``waitall``, untimed) and the value is ready.

In both, four calls are timed one by one, interleaved: ``v.copyto(dst)`` into a
preallocated NDArray (the floor: one engine push, what mxsidecar cannot go below),
``add_scalar(tag, v)``, then the same two for a 1M-value array (``add_histogram``).
Each call gets its own untimed prelude (the pushed ``dot``s, or ``waitall``), so that
every call, the floor's included, starts from the same state, as a call right after
``trainer.step()`` does: a thread switch that an earlier call left pending (a helper
thread woken, waiting for the GIL) lands in the prelude, as it would land in the
user's next MXNet call, not in whichever timed call happens to come next.  That cost
is real, and ``bench_steptime.py`` is what charges it.  The writer uses
``on_full='drop'`` and is flushed every 10 iterations (untimed), so a call never waits
for the sidecar.  One JSON line per call and condition: p50, p90 and
``ratio_to_floor`` (p50 over the floor's p50 in the same condition).

Each call's CPU time is taken too (``time.thread_time_ns`` around the wall clock, so
both clock reads are in it, for every case alike): ``cpu_p50_us`` and
``cpu_ratio_to_floor`` are what the training thread itself spent, and
``off_cpu_p50_us`` (wall minus CPU, per call, floored at 0) is the time the kernel had
it off the core, runnable behind MXNet's threads.  It tells preemption apart from a
call whose own instructions run slower; measured busy, it is 0 at p50 (``perf/README.md``).
On a VM, time the hypervisor takes from the vCPU may count as CPU time here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

from common import emit, percentile  # noqa: E402


def run(n: int = 150) -> list[dict[str, Any]]:
    import mxnet as mx

    from mxsidecar import SidecarWriter

    a = mx.nd.random.uniform(shape=(384, 384))
    big = mx.nd.random.uniform(shape=(1_000_000,))
    dst_scalar = mx.nd.zeros((1,))
    dst_big = mx.nd.zeros((1_000_000,))
    mx.nd.waitall()
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    cases = ("copyto_scalar", "add_scalar_pending", "copyto_1M", "add_histogram_1M")
    samples: dict[tuple[str, str], list[int]] = {(c, k): [] for c in ("busy", "idle") for k in cases}
    cpu: dict[tuple[str, str], list[int]] = {key: [] for key in samples}  # the same calls' CPU time
    with tempfile.TemporaryDirectory() as logdir:
        w = SidecarWriter(logdir, on_full="drop", slab_mb=256)
        w.flush()
        for i in range(n):
            for condition in ("busy", "idle"):
                for case in cases:
                    if condition == "busy":
                        work = a
                        for _ in range(4):
                            work = mx.nd.dot(work, a) * 1e-3  # pushed, not waited for
                        v = work[0:1, 0] + i  # pending until the dots are done
                        h = big + work[0, 0]
                    else:
                        v = mx.nd.ones((1,)) * i
                        h = big + 1.0
                        mx.nd.waitall()
                    c0 = cpu_clock()
                    t0 = clock()
                    if case == "copyto_scalar":
                        v.copyto(dst_scalar)
                    elif case == "add_scalar_pending":
                        w.add_scalar("loss", v, i)
                    elif case == "copyto_1M":
                        h.copyto(dst_big)
                    else:
                        w.add_histogram("h", h, i)
                    samples[(condition, case)].append(clock() - t0)
                    cpu[(condition, case)].append(cpu_clock() - c0)
            if i % 10 == 9:
                mx.nd.waitall()
                w.flush()
        w.close()
    out = []
    for condition in ("busy", "idle"):
        for case in cases:
            s = sorted(samples[(condition, case)])
            floor_case = (condition, "copyto_1M" if "1M" in case else "copyto_scalar")
            floor = sorted(samples[floor_case])
            spent, floor_spent = sorted(cpu[(condition, case)]), sorted(cpu[floor_case])
            off_cpu = [max(0, w - c) for w, c in zip(samples[(condition, case)], cpu[(condition, case)])]
            rec: dict[str, Any] = {
                "bench": "caller_vs_push",
                "engine": condition,
                "call": case,
                "n": n,
                "p50_us": round(percentile(s, 50) / 1e3, 1),
                "p90_us": round(percentile(s, 90) / 1e3, 1),
                "ratio_to_floor": round(percentile(s, 50) / percentile(floor, 50), 2),
                "cpu_p50_us": round(percentile(spent, 50) / 1e3, 1),
                "cpu_ratio_to_floor": round(percentile(spent, 50) / percentile(floor_spent, 50), 2),
                "off_cpu_p50_us": round(percentile(sorted(off_cpu), 50) / 1e3, 1),
            }
            emit(rec)
            out.append(rec)
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=150)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    run(30 if args.quick else args.n)
