"""Backpressure: the caller's cost when the sidecar cannot keep up, drop accounting,
time blocked, a tuning sweep, and the RSS of both processes over a long run.

The sidecar is slowed on purpose by the fault hook (``MXSIDECAR_FAULTS``, read by the
sidecar at start: it inherits the environment the writer is created in), which sleeps
``SLOW_SECONDS`` before encoding each item.  Loops are *paced* like training: call i is
due ``period`` after call i-1 (untimed sleep, standing for the step's compute; after a
wait the schedule restarts from now, so there is no catch-up burst), so a normal sidecar
keeps up and a slowed one does not.  Every ``add_*`` call is timed on its own
(``perf_counter_ns``); figures are medians over repeats, writers interleaved.

1. ``add_*_drop_{normal,slowed}_sidecar``: per-call p50/p90/p99 with ``on_full='drop'``
   and a small ``max_queue``; ``p50_admitted_us`` / ``p50_dropped_us`` split the calls
   that were enqueued from those that were dropped.  Then ``backpressure_drop_accounting``:
   the event files read back must hold exactly ``logged - stats()['dropped']`` values
   per tag (stats taken before close).
2. ``add_*_block_slowed_sidecar``: the same with ``on_full='block'``: ``blocked_seconds``.
3. ``backpressure_sweep``: ``max_queue`` x ``slab_mb`` x ``on_full`` on a mixed load.
4. ``backpressure_rss``: RSS of trainer and sidecar at 10 points of a long run.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from common import emit, percentile

__all__ = ["run", "sweep_markdown"]

FAULTS_ENV = "MXSIDECAR_FAULTS"
SLOW_SECONDS = 0.002  # the slowed sidecar sleeps this long before encoding each item
SLOW_NAME = f"slowed_{SLOW_SECONDS * 1e3:g}ms"
MB = 2**20


# -- helpers -----------------------------------------------------------------------
@contextmanager
def _fault_env(slow: bool) -> Iterator[None]:
    """The fault hook in the environment while a writer (and so its sidecar) is created."""
    old = os.environ.get(FAULTS_ENV)
    if slow:
        os.environ[FAULTS_ENV] = json.dumps([{"at": "encode", "action": "sleep", "seconds": SLOW_SECONDS}])
    else:
        os.environ.pop(FAULTS_ENV, None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(FAULTS_ENV, None)
        else:
            os.environ[FAULTS_ENV] = old


def _writer(logdir: str, slow: bool, **kwargs: Any) -> Any:
    from mxsidecar import SidecarWriter

    with _fault_env(slow):
        w = SidecarWriter(logdir, **kwargs)
    w.flush()  # the sidecar is up: its startup is not what this measures
    return w


def _drop_counter(w: Any) -> Callable[[], int] | None:
    """Items dropped so far, read after each call (untimed) to split admitted from dropped.

    Reads the pipeline's own counter (cheap; stats() is a round trip to the sidecar);
    None if that internal changed, and the split is then left out.
    """
    flow = getattr(getattr(w, "_pipe", None), "flow", None)
    if flow is None or not isinstance(getattr(flow, "dropped_total", None), int):
        return None
    return lambda: flow.dropped_total


def _values_in_files(logdir: str) -> Counter[str]:
    """Number of summary values per tag in every event file under ``logdir``."""
    from mxsidecar.formats.proto import event_pb2
    from mxsidecar.formats.records import iter_records

    counts: Counter[str] = Counter()
    for path in glob.glob(os.path.join(logdir, "**", "events.out.tfevents.*"), recursive=True):
        with open(path, "rb") as f:
            data = f.read()
        for rec in iter_records(data):
            for value in event_pb2.Event.FromString(rec.data).summary.value:
                counts[value.tag] += 1
    return counts


def _accounting(logged: dict[tuple[str, str], int], stats: dict[str, Any], logdir: str) -> dict[str, Any]:
    """``logged - dropped == in file`` for each (kind, tag); stats taken before close."""
    in_file = _values_in_files(logdir)
    per_tag = {}
    ok = True
    for (kind, tag), n in logged.items():
        dropped = stats["dropped_by_tag"].get(f"{kind}/{tag}", 0)
        tag_ok = n - dropped == in_file.get(tag, 0)
        ok = ok and tag_ok
        per_tag[tag] = {"logged": n, "dropped": dropped, "in_file": in_file.get(tag, 0), "ok": tag_ok}
    return {"ok": ok and stats.get("rejected", 0) == 0, "per_tag": per_tag, "rejected": stats.get("rejected", 0)}


def _sidecar_ms_per_item(stats: dict[str, Any]) -> float | None:
    """The sidecar's own time per item written (its fault-hook sleep included)."""
    sc = stats.get("sidecar") or {}
    busy, written = sc.get("busy_seconds"), sc.get("written")
    if not busy or not written or not sum(written.values()):
        return None
    return sum(busy.values()) / sum(written.values()) * 1e3


class _Pacer:
    """Sleeps until the next call is due; after a late call the schedule restarts."""

    def __init__(self, period_s: float) -> None:
        self.period = int(period_s * 1e9)
        self.due = time.perf_counter_ns()

    def wait(self) -> None:
        now = time.perf_counter_ns()
        if self.due > now:
            time.sleep((self.due - now) / 1e9)
            self.due += self.period
        else:
            self.due = now + self.period


def _pct(samples_ns: list[int]) -> dict[str, float]:
    s = sorted(samples_ns)
    if not s:
        return {}
    return {
        "p50_us": percentile(s, 50) / 1e3,
        "p90_us": percentile(s, 90) / 1e3,
        "p99_us": percentile(s, 99) / 1e3,
        "mean_us": sum(s) / len(s) / 1e3,
    }


def _median_record(runs: list[dict[str, Any]], keys: list[str], digits: int = 3) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        vals = [r[key] for r in runs if r.get(key) is not None]
        if vals:
            out[key] = round(statistics.median(vals), digits)
    return out


# -- 1 and 2: caller cost under a slowed sidecar -----------------------------------
def _paced_run(kind: str, slow: bool, on_full: str, n: int, period_s: float, max_queue: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    hist = rng.standard_normal(100_000).astype(np.float32)
    values = [1.0 / (i + 1) for i in range(n)]
    with tempfile.TemporaryDirectory() as logdir:
        w = _writer(logdir, slow, max_queue=max_queue, on_full=on_full)
        if kind == "scalar":
            add_scalar = w.add_scalar

            def call(i: int) -> None:
                add_scalar("loss", values[i], i)

            logged = {("scalar", "loss"): n}
        else:
            add_histogram = w.add_histogram

            def call(i: int) -> None:
                add_histogram("weights", hist, i)

            logged = {("histogram", "weights"): n}
        dropped_now = _drop_counter(w)
        clock = time.perf_counter_ns
        samples = [0] * n
        was_dropped = [False] * n
        pacer = _Pacer(period_s)
        before = dropped_now() if dropped_now else 0
        start = clock()
        for i in range(n):
            pacer.wait()
            t0 = clock()
            call(i)
            samples[i] = clock() - t0
            if dropped_now is not None:
                after = dropped_now()
                was_dropped[i] = after != before
                before = after
        loop_s = (clock() - start) / 1e9
        stats = w.stats()
        t0 = clock()
        w.close()
        close_s = (clock() - t0) / 1e9
        acct = _accounting(logged, stats, logdir)
    dropped = sum(stats["dropped"].values())
    rec: dict[str, Any] = {
        **_pct(samples),
        "max_us": max(samples) / 1e3,
        "sidecar_ms_per_item": _sidecar_ms_per_item(stats),
        "dropped": dropped,
        "dropped_frac": dropped / n,
        "blocked_seconds": stats["blocked_seconds"],
        "loop_s": loop_s,
        "close_s": close_s,
        "achieved_period_us": loop_s / n * 1e6,
        "accounting": acct,
    }
    if dropped_now is not None:
        adm = [t for t, d in zip(samples, was_dropped) if not d]
        drp = [t for t, d in zip(samples, was_dropped) if d]
        rec["p50_admitted_us"] = percentile(sorted(adm), 50) / 1e3 if adm else None
        rec["p99_admitted_us"] = percentile(sorted(adm), 99) / 1e3 if adm else None
        rec["p50_dropped_us"] = percentile(sorted(drp), 50) / 1e3 if drp else None
    return rec


def caller_cost(quick: bool, repeats: int) -> list[dict[str, Any]]:
    """Parts 1 and 2: drop (normal and slowed sidecar), then block (slowed)."""
    kinds = {
        # kind: (bench name, calls, period between calls, max_queue)
        "scalar": ("add_scalar_float", 400 if quick else 1500, 200e-6, 64),
        "histogram": ("add_histogram_100k_numpy", 100 if quick else 300, 3e-3, 16),
    }
    conditions = [("drop", False), ("drop", True), ("block", True)]
    runs: dict[tuple[str, str, bool], list[dict[str, Any]]] = {}
    for _ in range(repeats):
        for kind, (_, n, period, max_queue) in kinds.items():
            for on_full, slow in conditions:
                runs.setdefault((kind, on_full, slow), []).append(_paced_run(kind, slow, on_full, n, period, max_queue))
    records = []
    keys = ["p50_us", "p90_us", "p99_us", "mean_us", "max_us", "p50_admitted_us", "p99_admitted_us", "p50_dropped_us"]
    keys += ["sidecar_ms_per_item", "dropped", "dropped_frac", "blocked_seconds"]
    keys += ["loop_s", "close_s", "achieved_period_us"]
    for (kind, on_full, slow), rs in runs.items():
        name, n, period, max_queue = kinds[kind]
        sidecar = SLOW_NAME if slow else "normal"
        rec: dict[str, Any] = {
            "bench": f"{name}_{on_full}_{sidecar}_sidecar",
            "writer": "mxsidecar",
            "sidecar": sidecar,
            "on_full": on_full,
            "max_queue": max_queue,
            "n": n,
            "period_us": period * 1e6,
            "repeats": len(rs),
            **_median_record(rs, keys),
        }
        emit(rec)
        records.append(rec)
        per_tag: dict[str, dict[str, int]] = {}
        for r in rs:
            for tag, c in r["accounting"]["per_tag"].items():
                agg = per_tag.setdefault(tag, {"logged": 0, "dropped": 0, "in_file": 0})
                for k in agg:
                    agg[k] += c[k]
        acct = {
            "bench": "backpressure_drop_accounting",
            "case": rec["bench"],
            "drop_accounting_ok": all(r["accounting"]["ok"] for r in rs),
            "runs": len(rs),
            "rejected": sum(r["accounting"]["rejected"] for r in rs),
            "per_tag_totals": per_tag,
        }
        emit(acct)
        records.append(acct)
    return records


# -- 3: the sweep --------------------------------------------------------------------
def _mixed_run(steps: int, period_s: float, max_queue: int, slab_mb: int, on_full: str) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    hist = rng.standard_normal(256 * 1024).astype(np.float32)
    image = rng.random((3, 64, 64)).astype(np.float32)
    with tempfile.TemporaryDirectory() as logdir:
        w = _writer(logdir, True, max_queue=max_queue, slab_mb=slab_mb, on_full=on_full)
        add_scalar, add_histogram, add_image = w.add_scalar, w.add_histogram, w.add_image
        clock = time.perf_counter_ns
        samples: list[int] = []
        logged: Counter[tuple[str, str]] = Counter()
        pacer = _Pacer(period_s)
        start = clock()
        for i in range(steps):
            pacer.wait()
            t0 = clock()
            add_scalar("loss", 1.0 / (i + 1), i)
            samples.append(clock() - t0)
            logged["scalar", "loss"] += 1
            if i % 10 == 0:
                t0 = clock()
                add_histogram("weights", hist, i)
                samples.append(clock() - t0)
                logged["histogram", "weights"] += 1
            if i % 50 == 0:
                t0 = clock()
                add_image("input", image, i)
                samples.append(clock() - t0)
                logged["image", "input"] += 1
        loop_end = clock()
        stats = w.stats()
        w.close()
        end = clock()
        acct = _accounting(dict(logged), stats, logdir)
    pct = _pct(samples)
    return {
        "blocked_seconds": stats["blocked_seconds"],
        "dropped_scalar": stats["dropped"].get("scalar", 0),
        "dropped_histogram": stats["dropped"].get("histogram", 0),
        "dropped_image": stats["dropped"].get("image", 0),
        "call_mean_us": pct["mean_us"],
        "call_p50_us": pct["p50_us"],
        "call_p99_us": pct["p99_us"],
        "loop_s": (loop_end - start) / 1e9,
        "close_s": (end - loop_end) / 1e9,
        "wall_s": (end - start) / 1e9,
        "sidecar_ms_per_item": _sidecar_ms_per_item(stats),
        "accounting_ok": acct["ok"],
    }


def sweep(quick: bool, repeats: int) -> list[dict[str, Any]]:
    steps, period = (200 if quick else 600), 1e-3
    configs = [(q, s, f) for q in (16, 256, 4096) for s in (8, 64) for f in ("block", "drop")]
    runs: dict[tuple[int, int, str], list[dict[str, Any]]] = {c: [] for c in configs}
    for _ in range(repeats):
        for c in configs:
            runs[c].append(_mixed_run(steps, period, *c))
    keys = ["blocked_seconds", "dropped_scalar", "dropped_histogram", "dropped_image"]
    keys += ["call_mean_us", "call_p50_us", "call_p99_us", "loop_s", "close_s", "wall_s", "sidecar_ms_per_item"]
    records = []
    for (q, s, f), rs in runs.items():
        rec = {
            "bench": "backpressure_sweep",
            "sidecar": SLOW_NAME,
            "max_queue": q,
            "slab_mb": s,
            "on_full": f,
            "steps": steps,
            "step_period_ms": period * 1e3,
            "logged": {"scalar": steps, "histogram": len(range(0, steps, 10)), "image": len(range(0, steps, 50))},
            "repeats": len(rs),
            **_median_record(rs, keys),
            "accounting_ok": all(r["accounting_ok"] for r in rs),
        }
        emit(rec)
        records.append(rec)
    return records


def sweep_markdown(records: list[dict[str, Any]]) -> str:
    """The sweep as a Markdown table (for results.md)."""
    rows = [r for r in records if r.get("bench") == "backpressure_sweep"]
    if not rows:
        return ""
    r0 = rows[0]
    lines = [
        f"Sidecar slowed by {SLOW_SECONDS * 1e3:g} ms per item; {r0['steps']} steps of {r0['step_period_ms']:g} ms, "
        f"each logging a scalar, every 10th a 256k-float histogram, every 50th a 3x64x64 image.",
        "",
        "| max_queue | slab_mb | on_full | blocked s | dropped scalar/hist/image | mean call µs | p99 call µs "
        "| loop s | close s | wall s |",
        "|---:|---:|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['max_queue']} | {r['slab_mb']} | {r['on_full']} | {r['blocked_seconds']:.2f} "
            f"| {r['dropped_scalar']:g}/{r['dropped_histogram']:g}/{r['dropped_image']:g} "
            f"| {r['call_mean_us']:.1f} | {r['call_p99_us']:.1f} | {r['loop_s']:.2f} | {r['close_s']:.2f} "
            f"| {r['wall_s']:.2f} |"
        )
    return "\n".join(lines) + "\n"


# -- 4: RSS over a long run ---------------------------------------------------------
def _memory(pid: int) -> dict[str, float]:
    """RSS (psutil) and, from /proc, its anonymous (private heap) and shared-memory parts, in MB."""
    import psutil

    out = {"rss_mb": psutil.Process(pid).memory_info().rss / MB}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    key = "anon_mb" if line.startswith("RssAnon") else "shmem_mb"
                    out[key] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def rss(quick: bool) -> list[dict[str, Any]]:
    scalars, hist_every = (100_000 if quick else 1_000_000), 100
    hist = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    points = 10
    chunk = scalars // points
    samples: dict[str, list[dict[str, float]]] = {"trainer": [], "sidecar": []}
    with tempfile.TemporaryDirectory() as logdir:
        w = _writer(logdir, False, on_full="block")
        pid = w.stats()["sidecar_pid"]
        me = os.getpid()
        baseline = {"trainer": _memory(me), "sidecar": _memory(pid)}
        add_scalar, add_histogram = w.add_scalar, w.add_histogram
        start = time.perf_counter()
        for p in range(points):
            for i in range(p * chunk, (p + 1) * chunk):
                add_scalar("loss", 0.5, i)
                if i % hist_every == hist_every - 1:
                    add_histogram("weights", hist, i)
            samples["trainer"].append(_memory(me))
            samples["sidecar"].append(_memory(pid))
        loop_s = time.perf_counter() - start
        stats = w.stats()
        w.close()
        wall_s = time.perf_counter() - start
        logged = {("scalar", "loss"): scalars, ("histogram", "weights"): scalars // hist_every}
        acct = _accounting(logged, stats, logdir)
    rec: dict[str, Any] = {
        "bench": "backpressure_rss",
        "scalars": scalars,
        "histograms": scalars // hist_every,
        "histogram_values": hist.size,
        "on_full": "block",
        "points": points,
        "loop_s": round(loop_s, 2),
        "wall_s": round(wall_s, 2),
        "blocked_seconds": round(stats["blocked_seconds"], 2),
        "all_written": acct["ok"],
    }
    for proc, ss in samples.items():
        rss_mb = [s["rss_mb"] for s in ss]
        rec[f"{proc}_rss_mb"] = {
            "baseline": round(baseline[proc]["rss_mb"], 2),
            "min": round(min(rss_mb), 2),
            "max": round(max(rss_mb), 2),
            "first": round(rss_mb[0], 2),
            "last": round(rss_mb[-1], 2),
            "samples": [round(x, 2) for x in rss_mb],
        }
        # Flatness: growth from the first point (after the first tenth: warm-up) to the last.
        rec[f"{proc}_rss_growth_after_warmup_mb"] = round(rss_mb[-1] - rss_mb[0], 2)
        for part in ("anon_mb", "shmem_mb"):
            if all(part in s for s in ss):
                rec[f"{proc}_{part}"] = [round(s[part], 2) for s in ss]
    emit(rec)
    return [rec]


def run(quick: bool = False) -> list[dict[str, Any]]:
    repeats = 1 if quick else 3
    records = caller_cost(quick, repeats)
    records += sweep(quick, repeats)
    records += rss(quick)
    return records


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    records = run(quick="--quick" in sys.argv[1:])
    print(sweep_markdown(records))
