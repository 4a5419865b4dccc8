"""What first use of the shared-memory arena costs: page faults.

    python perf/bench_arena.py [--repeats 15]

A new POSIX shared-memory segment is mapped without pages; each page is faulted in the
first time it is written.  Two lines (medians over ``--repeats`` fresh segments, with
min and max, and the 1-minute load average before: page faults slow down when other
work competes for the CPU):

* ``arena_prefault``: ``prefault_64mb_ms``, writing zeros over a whole fresh 64 MB
  arena (the default ``slab_mb``) in 4 MB chunks, as ``bench_steptime.py`` does
  before each timed run (its ``arena_prefault_ms``).
* ``arena_span_4mb``: ``fresh_ms``, copying a 4 MB array into a fresh span, and
  ``warm_us``, the same copy into the same span again: why ``wire/arena.py`` reuses
  the lowest addresses first.

The figures quoted in ``perf/README.md``, ``perf/bench_steptime.py`` and
``mxsidecar/wire/arena.py`` come from this command.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

from common import emit  # noqa: E402

MB = 1 << 20


def _fresh(nbytes: int):  # type: ignore[no-untyped-def]
    from mxsidecar.wire.arena import Arena

    return Arena.create(nbytes)


def _free(arena) -> None:  # type: ignore[no-untyped-def]
    arena.close()
    arena.unlink()


def prefault_ms(nbytes: int = 64 * MB, chunk: int = 4 * MB) -> float:
    arena = _fresh(nbytes)
    try:
        buf = arena.buf
        zeros = bytes(chunk)
        t0 = time.perf_counter()
        for off in range(0, len(buf), chunk):
            n = min(chunk, len(buf) - off)
            buf[off : off + n] = zeros[:n]
        return (time.perf_counter() - t0) * 1e3
    finally:
        _free(arena)


def span_ms(nbytes: int = 4 * MB) -> tuple[float, float]:
    """(first copy into a fresh span, second copy into the same span), in ms."""
    import numpy as np

    src = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    arena = _fresh(nbytes)
    try:
        dst = np.frombuffer(arena.buf, np.uint8, count=nbytes)
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            dst[:] = src
            times.append((time.perf_counter() - t0) * 1e3)
        del dst  # the mapping cannot close while a view is exported
        return times[0], times[1]
    finally:
        _free(arena)


def _summary(values: list[float], digits: int) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def run(repeats: int = 15) -> list[dict[str, object]]:
    load_before = round(os.getloadavg()[0], 2)  # page faults slow down with the machine's other load
    pre = [prefault_ms() for _ in range(repeats)]
    spans = [span_ms() for _ in range(repeats)]
    p = _summary(pre, 1)
    fresh = _summary([s[0] for s in spans], 2)
    warm = _summary([s[1] * 1e3 for s in spans], 0)
    out: list[dict[str, object]] = [
        {
            "bench": "arena_prefault",
            "prefault_64mb_ms": p["median"],
            "min_ms": p["min"],
            "max_ms": p["max"],
            "repeats": repeats,
        },
        {
            "bench": "arena_span_4mb",
            "fresh_ms": fresh["median"],
            "fresh_min_ms": fresh["min"],
            "fresh_max_ms": fresh["max"],
            "warm_us": warm["median"],
            "warm_min_us": warm["min"],
            "warm_max_us": warm["max"],
            "repeats": repeats,
        },
    ]
    for rec in out:
        rec["loadavg_1min"] = load_before
        emit(rec)
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    run(ap.parse_args().repeats)
