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

__all__ = ["Unavailable", "emit", "in_worker", "interleave", "measure", "percentile", "time_calls", "time_flushed"]
__all__ += ["timer_overhead_ns", "worker_result"]

RESULT = "RESULT "  # prefix of a worker's answer line on its stdout


class Unavailable(Exception):
    """A writer that cannot be measured here (not installed, no environment for it)."""


def in_worker(name: str) -> bool:
    """mxboard cannot be imported beside mxsidecar (protobuf): it runs in ``mxboard_env``."""
    return name == "mxboard" and importlib.util.find_spec("mxboard") is None


def measure(name: str, module: str, once: Callable[..., Any], *args: Any) -> Any:
    """``once(*args)`` here, or, for mxboard when this environment cannot import it, the
    same call by ``perf/<module>.py --worker *args`` in mxboard's own environment
    (``mxboard_env``), whose :func:`worker_result` comes back.  Raises Unavailable."""
    if not in_worker(name):
        try:
            return once(*args)
        except ImportError as exc:
            raise Unavailable(f"not importable here ({exc})") from exc
    import mxboard_env

    return mxboard_env.run_worker(module, *map(str, args))


def interleave(
    bench: str,
    writers: tuple[str, ...],
    repeats: int,
    module: str,
    once: Callable[..., Any],
    args: Callable[[str], tuple[Any, ...]],
    skipped: set[str] | None = None,
) -> dict[str, list[Any]]:
    """Every writer in turn, ``repeats`` times (A B A B ...): per writer, the results of
    ``measure(name, module, once, *args(name))``.  A writer that cannot be measured is
    reported once (a ``skipped`` line) and added to ``skipped``, which a benchmark with
    several cases shares between them."""
    skipped = set() if skipped is None else skipped
    results: dict[str, list[Any]] = {name: [] for name in writers}
    for _ in range(repeats):
        for name in writers:
            if name in skipped:
                continue
            try:
                results[name].append(measure(name, module, once, *args(name)))
            except Unavailable as exc:
                emit({"bench": bench, "writer": name, "skipped": str(exc)})
                skipped.add(name)
    return results


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


def time_flushed(
    w: Any,
    call: Callable[[Any, int], Any],
    n: int,
    prepare: Callable[[int], Any] = lambda i: None,
    settle: Callable[[], Any] = lambda: None,
    every: int = 10,
) -> dict[str, Any]:
    """Time ``call(prepare(i), i)`` for i in range(n), each on its own, flushing ``w``
    every ``every`` calls (after ``settle()``), then close it.

    ``prepare`` (the value to log) and ``settle`` (an engine drain) are untimed.  The
    writer is flushed first, so its start-up is not what is measured.  The flushes keep
    a backlog from making a call wait: ``samples`` (ns per call) are the caller's cost;
    ``charged_ns`` adds the flushes and close, so deferred work is charged too.
    """
    clock = time.perf_counter_ns
    w.flush()
    settle()
    samples = []
    charged = 0
    for i in range(n):
        value = prepare(i)
        t0 = clock()
        call(value, i)
        samples.append(clock() - t0)
        charged += samples[-1]
        if i % every == every - 1:
            settle()
            t0 = clock()
            w.flush()
            charged += clock() - t0
    t0 = clock()
    w.close()
    close = clock() - t0
    return {"samples": samples, "charged_ns": charged + close, "close_ms": close / 1e6}


def emit(record: dict[str, Any], out: Any = sys.stdout) -> None:
    """One machine-readable line per measurement."""
    print(json.dumps(record, sort_keys=True), file=out, flush=True)
