"""Timing helpers shared by the benchmarks: per-call caller cost, percentiles, one JSON line
each, and where a writer that lives in another environment (mxboard) is measured."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Unavailable", "emit", "measure", "percentile", "time_calls", "timer_overhead_ns", "worker_result"]

RESULT = "RESULT "  # prefix of a worker's answer line on its stdout


class Unavailable(Exception):
    """A writer that cannot be measured here (not installed, no environment for it)."""


def measure(name: str, module: str, once: Callable[..., Any], *args: Any) -> Any:
    """``once(*args)`` here, or, for mxboard when this environment cannot import it, the
    same call by ``perf/<module>.py --worker *args`` in mxboard's own environment
    (``mxboard_env``), whose :func:`worker_result` comes back.  Raises Unavailable."""
    if name != "mxboard" or importlib.util.find_spec("mxboard") is not None:
        try:
            return once(*args)
        except ImportError as exc:
            raise Unavailable(f"not importable here ({exc})") from exc
    import mxboard_env

    return mxboard_env.run_worker(module, *map(str, args))


def worker_result(value: Any) -> None:
    """A worker's answer, read back by :func:`mxboard_env.run_worker`."""
    print(RESULT + json.dumps(value), flush=True)


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def timer_overhead_ns(n: int = 20000) -> float:
    """Median cost of the timing brackets themselves (reported, not subtracted)."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(n):
        t0 = clock()
        samples.append(clock() - t0)
    return float(statistics.median(samples))


def time_calls(call: Callable[[int], Any], n: int, finish: Callable[[], Any] | None = None) -> dict[str, float]:
    """Time ``call(i)`` for i in range(n), each on its own, then ``finish()`` (e.g. close).

    Returns p50/p90/p99 of the per-call cost and ``mean_incl_close``: the whole loop
    plus ``finish`` divided by n, which charges any deferred work to the calls.
    """
    clock = time.perf_counter_ns
    samples = [0] * n
    start = clock()
    for i in range(n):
        t0 = clock()
        call(i)
        samples[i] = clock() - t0
    loop_end = clock()
    if finish is not None:
        finish()
    end = clock()
    s = sorted(samples)
    us = 1e-3
    return {
        "n": n,
        "p50_us": percentile(s, 50) * us,
        "p90_us": percentile(s, 90) * us,
        "p99_us": percentile(s, 99) * us,
        "mean_us": (loop_end - start) / n * us,
        "mean_incl_close_us": (end - start) / n * us,
        "close_ms": (end - loop_end) * 1e-6,
    }


def emit(record: dict[str, Any], out: Any = sys.stdout) -> None:
    """One machine-readable line per measurement."""
    print(json.dumps(record, sort_keys=True), file=out, flush=True)
