"""What a writer on a rank that does not write costs (``ranks='zero'``, rank > 0).

    python perf/bench_ranks.py

Per call, p50 of 100,000 calls timed one by one, beside the floor measured in the same
loop: a call of a Python function that does nothing.  One line per call.
"""

from __future__ import annotations

import os
import sys
import time

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

from common import emit, percentile  # noqa: E402


def _floor(*args: object, **kwargs: object) -> None:
    return None


def run(n: int = 100_000) -> list[dict[str, object]]:
    import numpy as np

    from mxsidecar import SidecarWriter

    w = SidecarWriter("/nonexistent/never-created", rank=1, world_size=2)
    values = np.ones(1000, np.float32)
    cases = {
        "add_scalar_float": (lambda i: w.add_scalar("loss", 0.5, i)),
        "add_histogram_numpy_1k": (lambda i: w.add_histogram("h", values, i)),
        "floor_empty_call": (lambda i: _floor("loss", 0.5, i)),
    }
    clock = time.perf_counter_ns
    samples: dict[str, list[int]] = {k: [] for k in cases}
    for i in range(n):  # interleaved: every case sees the same machine
        for name, call in cases.items():
            t0 = clock()
            call(i)
            samples[name].append(clock() - t0)
    floor = percentile(sorted(samples["floor_empty_call"]), 50)
    out = []
    for name, s in samples.items():
        p50 = percentile(sorted(s), 50)
        rec = {
            "bench": "silent_rank",
            "call": name,
            "p50_us": round(p50 / 1e3, 3),
            "ratio_to_floor": round(p50 / floor, 2),
        }
        emit(rec)
        out.append(rec)
    return out


if __name__ == "__main__":
    run()
