"""Step-time overhead: what logging costs a real training step, per writer.

A hybridized Gluon CNN (conv 32 3x3, pool, conv 64 3x3, pool, dense 128, dense 10;
225k parameters in 8 arrays) trains on CPU on synthetic 1x28x28 batches of 64
(pre-made NDArrays, so data loading costs nothing).  A step is forward, backward,
``trainer.step``, the loss mean and accuracy as NDArrays (computed in every variant,
the baseline included: a loop computes its metrics whether or not it logs them), the
writer's calls, and then ``mx.nd.waitall()``.

**Why a ``waitall()`` at the end of every step, in every variant.**  A real loop syncs
about once per step anyway (a metric update or a loss print calls ``asnumpy()``), and
the sync must be the same in all variants.  ``waitall()`` is the strictest choice: every
step pays for *all* the engine work it pushed, mxsidecar's engine copies of the logged
arrays included, inside the timed step; nothing can be deferred past the timed window
or hidden behind the next step's Python.  (Syncing on the loss alone would let backward,
update and the copies overlap the next step, which flatters a writer that pushes work
onto the engine; timing blocks of N steps would hide per-step variance.)  The sidecar
process's CPU is charged where it lands: on the two cores training also runs on.

Profiles (``global_step`` counts from the first timed step):

* **heavy**: 3 scalars (loss and accuracy NDArrays, the learning rate as a float), a
  histogram of every gradient and every weight (16 histograms, 450k values) every step,
  and the input batch's first 16 images (16x1x28x28) as one grid every 50 steps;
* **typical**: the 3 scalars every step, the 16 histograms every 20 steps, the images
  every 100 steps.

A run's length is a multiple of its profile's longest period, so each run logs at
exactly the profile's rates.  Writers: ``none`` (the baseline), ``mxsidecar`` (NDArrays
as they are: engine copies, no sync), ``tensorboardX`` (``asscalar()`` / ``asnumpy()`` in
the caller, as its users must), ``inline`` (``perf/inline_writer.py``: mxboard's way,
all in the caller) and ``mxboard`` itself, which needs protobuf < 5 and so runs in an
environment of its own (``mxboard_env``): a worker process per repeat, in the same
interleaved schedule, measures its run against baseline runs of its own (skipped
with a note if that environment cannot be made).  Each writer is created, warmed up for a
few logged steps and flushed before its timed run (mxsidecar's shared-memory arena is
faulted in first: a one-time cost, ``arena_prefault_ms``).  Runs are interleaved, each
writer's run between two baseline runs (none A none B none C, repeated), and the
overhead is the median over repeats of a run's mean step time divided by the mean of
the two baseline runs around it, minus one.  After the loop, ``flush()`` (the *drain*:
work the writer deferred, for mxsidecar what the sidecar has not yet written) is timed
and charged to the steps in ``overhead_incl_drain_pct``; ``close()`` after it is a
fixed cost per writer (fsync, the sidecar's exit), reported apart.  mxsidecar's targets
are judged on the larger of the two overheads.  CPU: ``psutil`` user+system of the
training process (all its threads: MXNet's engine and OpenMP workers, mxsidecar's
completion and receiver threads, tensorboardX's writer thread) over the run and close,
split by thread over the loop, and of the sidecar process
(``stats()["sidecar"]["cpu_seconds"]``, loop and drain), per step.

``--diagnose`` (standalone only) runs the heavy profile with mxsidecar variants that
take its overhead apart (``VARIANTS``): no blocking (a queue and slab that hold the
run), the training process's side alone (the sidecar suspended during the loop), host
values in the caller, the sidecar under the normal policy at nice 10, 0 and 19
(``sched_idle=False``), and the sidecar pinned to one CPU.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from common import emit, in_worker

__all__ = ["PROFILES", "TARGET_PCT", "WRITERS", "markdown", "plot", "run"]

BATCH = 64
IMAGES = 16  # images of the input batch logged as one grid
WARMUP_STEPS = 3


@dataclass(frozen=True)
class Profile:
    hist_every: int
    image_every: int
    steps: int  # a multiple of image_every
    slow_steps: int  # for tensorboardX and mxboard, whose steps are many times longer (same rates)
    quick_steps: int


PROFILES = {
    "heavy": Profile(hist_every=1, image_every=50, steps=100, slow_steps=50, quick_steps=50),
    "typical": Profile(hist_every=20, image_every=100, steps=100, slow_steps=100, quick_steps=100),
}
TARGET_PCT = {"heavy": 15.0, "typical": 3.0}  # mxsidecar's targets on the 2-core box
WRITERS = ("none", "mxsidecar", "tensorboardX", "inline", "mxboard")
SLOW_WRITERS = ("tensorboardX", "mxboard")
# --diagnose: where mxsidecar's heavy-profile overhead goes (see the module docstring)
DIAGNOSE = ("none", "mxsidecar", "mxsidecar:roomy", "mxsidecar:paused", "mxsidecar:numpy")
DIAGNOSE += ("mxsidecar:nice10", "mxsidecar:nice0", "mxsidecar:nice19", "mxsidecar:pin1")
ROOMY = {"max_queue": 1 << 20, "slab_mb": 256}  # never blocks within a run (heavy: 1.8 MB a step)


# -- the model ------------------------------------------------------------------------
class Model:
    """The CNN, its trainer, and a few pre-made synthetic batches."""

    def __init__(self) -> None:
        import mxnet as mx
        from mxnet import gluon

        mx.random.seed(0)
        net = gluon.nn.HybridSequential()
        net.add(
            gluon.nn.Conv2D(32, kernel_size=3, activation="relu"),
            gluon.nn.MaxPool2D(2),
            gluon.nn.Conv2D(64, kernel_size=3, activation="relu"),
            gluon.nn.MaxPool2D(2),
            gluon.nn.Flatten(),
            gluon.nn.Dense(128, activation="relu"),
            gluon.nn.Dense(10),
        )
        net.initialize(mx.init.Xavier())
        net.hybridize()
        self.net = net
        self.trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9})
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        rng = np.random.default_rng(0)
        self.batches = [
            (
                mx.nd.array(rng.random((BATCH, 1, 28, 28), dtype=np.float32)),
                mx.nd.array(rng.integers(0, 10, BATCH), dtype="float32"),
            )
            for _ in range(8)
        ]
        self.step(0)  # builds the cached graph and the parameters' gradients
        mx.nd.waitall()
        self.params = [(name, p) for name, p in net.collect_params().items()]
        self.n_params = sum(int(np.prod(p.shape)) for _, p in self.params)

    def step(self, i: int) -> tuple[Any, Any, Any]:
        """One training step, pushed onto the engine; returns (input batch, loss mean, accuracy)."""
        from mxnet import autograd

        x, y = self.batches[i % len(self.batches)]
        with autograd.record():
            out = self.net(x)
            loss = self.loss_fn(out, y)
        loss.backward()
        self.trainer.step(BATCH)
        return x, loss.mean(), (out.argmax(axis=1) == y).mean()


# -- the writers ------------------------------------------------------------------------
Logger = Callable[[Any, int, Any, Any, Any], None]


def _make_logger(kind: str, profile: Profile, model: Model) -> Logger:
    """``log(writer, step, x, loss, accuracy)`` for one writer's API and needs."""
    params = model.params
    lr = model.trainer.learning_rate
    # tensorboardX takes host values only: its caller converts.  mxsidecar:numpy does the
    # same on purpose, to compare the engine-copy path with a sync + memcpy.  mxboard
    # takes NDArrays, but its add_scalar fails on one (float(NDArray) for its scalar
    # dict), so its users convert scalars; it has no add_images (add_image takes a batch).
    host = kind in ("tensorboardX", "mxsidecar:numpy")
    host_scalars = host or kind == "mxboard"

    def log(w: Any, step: int, x: Any, loss: Any, acc: Any) -> None:
        if host_scalars:
            w.add_scalar("train/loss", loss.asscalar(), step)
            w.add_scalar("train/accuracy", acc.asscalar(), step)
        else:
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/accuracy", acc, step)
        w.add_scalar("train/lr", lr, step)
        if step % profile.hist_every == 0:
            for name, p in params:
                g, d = p.grad(), p.data()
                w.add_histogram(f"{name}/grad", g.asnumpy() if host else g, step)
                w.add_histogram(name, d.asnumpy() if host else d, step)
        if step % profile.image_every == 0:
            images = x[:IMAGES]
            if kind == "mxboard":
                w.add_image("input", images, step)
            else:
                w.add_images("input", images.asnumpy() if host else images, step)

    return log


def _open_writer(kind: str, logdir: str) -> Any:
    """The writer, or raise ImportError (a writer not installed here is skipped)."""
    base, _, variant = kind.partition(":")
    if base == "mxsidecar":
        from mxsidecar import SidecarWriter

        if variant in ("roomy", "paused"):
            return SidecarWriter(logdir, **ROOMY)
        if variant.startswith("nice"):
            return SidecarWriter(logdir, nice=int(variant[4:]), sched_idle=False)
        if variant == "pin1":
            return SidecarWriter(logdir, cpu_affinity=[1])
        return SidecarWriter(logdir)
    if kind == "tensorboardX":
        from tensorboardX import SummaryWriter

        return SummaryWriter(logdir)
    if kind == "inline":
        from inline_writer import InlineWriter

        return InlineWriter(logdir)
    if kind == "mxboard":
        from mxboard import SummaryWriter as MxboardWriter

        return MxboardWriter(logdir)
    raise ValueError(kind)


def _prefault(w: Any) -> float | None:
    """Touch every page of mxsidecar's arena once, before anything is allocated in it; ms.

    A new shared-memory segment is faulted in page by page on first use: once per run
    (about 45 ms per 64 MB here, ``python perf/bench_arena.py``), like the sidecar's
    start, which a long run amortizes
    and a 100-step run would over-weight.  Reads the writer's internals; None if they moved.
    """
    buf = getattr(getattr(getattr(w, "_pipe", None), "arena", None), "buf", None)
    if buf is None:
        return None
    t0 = time.perf_counter()
    chunk = 1 << 22
    zeros = bytes(chunk)
    for off in range(0, len(buf), chunk):
        n = min(chunk, len(buf) - off)
        buf[off : off + n] = zeros[:n]
    return (time.perf_counter() - t0) * 1e3


def _cpu_seconds(proc: Any) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def _thread_cpu(proc: Any) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


def _thread_breakdown(before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
    """CPU seconds of the training thread, of the other Python threads (the writer's own:
    mxsidecar's completion and receiver threads, tensorboardX's event writer) and of
    MXNet's native threads (engine workers, OpenMP), between two snapshots."""
    main = threading.main_thread().native_id
    python = {t.native_id for t in threading.enumerate()}
    out = {"main": 0.0, "writer_threads": 0.0, "mxnet_threads": 0.0}
    for tid, cpu in after.items():
        delta = cpu - before.get(tid, 0.0)
        out["main" if tid == main else "writer_threads" if tid in python else "mxnet_threads"] += delta
    return out


def _one_run(model: Model, kind: str, profile: Profile, steps: int) -> dict[str, Any]:
    """Warm up, then time ``steps`` steps (each ending in waitall) and the writer's close."""
    import mxnet as mx
    import psutil

    me = psutil.Process()
    clock = time.perf_counter_ns
    with tempfile.TemporaryDirectory() as logdir:
        w = None if kind == "none" else _open_writer(kind, logdir)
        prefault_ms = _prefault(w) if kind.startswith("mxsidecar") else None
        log = None if w is None else _make_logger(kind, profile, model)
        for i in range(WARMUP_STEPS):  # step 0 of the warm-up logs every kind once
            x, loss, acc = model.step(i)
            if log is not None:
                log(w, i, x, loss, acc)
            mx.nd.waitall()
        if w is not None:
            w.flush()  # the writer is up and idle: its startup is not what this measures
        sidecar = None
        side0 = None
        if kind.startswith("mxsidecar"):
            stats = w.stats()
            side0 = stats["sidecar"]["cpu_seconds"]
            sidecar = psutil.Process(stats["sidecar_pid"])
        samples = [0] * steps
        log_ns = 0
        threads0 = _thread_cpu(me)
        cpu0 = _cpu_seconds(me)
        if kind == "mxsidecar:paused":
            assert sidecar is not None
            sidecar.suspend()  # SIGSTOP: the trainer's side alone (the queue and slab hold the whole run)
        try:
            start = clock()
            for i in range(steps):
                t0 = clock()
                x, loss, acc = model.step(i)
                if log is not None:
                    t1 = clock()
                    log(w, i, x, loss, acc)
                    log_ns += clock() - t1
                mx.nd.waitall()
                samples[i] = clock() - t0
            loop_ns = clock() - start
        finally:
            if kind == "mxsidecar:paused":
                assert sidecar is not None
                sidecar.resume()
        threads = _thread_breakdown(threads0, _thread_cpu(me))
        drain_ns = close_ns = 0
        extra: dict[str, Any] = {}
        if w is not None:
            t0 = clock()
            w.flush()  # what the writer deferred: mxsidecar's backlog, tensorboardX's queue, inline's buffer
            drain_ns = clock() - t0
            if sidecar is not None:
                stats = w.stats()  # untimed: a round trip to the sidecar
                extra = {
                    "arena_prefault_ms": prefault_ms,
                    "sidecar_cpu_ms_per_step": (stats["sidecar"]["cpu_seconds"] - side0) / steps * 1e3,
                    "blocked_seconds": stats["blocked_seconds"],
                    "dropped": sum(stats["dropped"].values()),
                }
            t0 = clock()
            w.close()  # then a fixed cost per writer (for mxsidecar: fsync, the sidecar's exit)
            close_ns = clock() - t0
        cpu1 = _cpu_seconds(me)
    s = sorted(samples)
    return {
        "step_ms_mean": loop_ns / steps / 1e6,
        "step_ms_p50": s[len(s) // 2] / 1e6,
        "step_ms_p90": s[min(len(s) - 1, int(0.9 * len(s)))] / 1e6,
        "drain_ms": drain_ns / 1e6,
        "close_ms": close_ns / 1e6,
        "step_ms_incl_drain": (loop_ns + drain_ns) / steps / 1e6,
        "log_calls_ms_per_step": log_ns / steps / 1e6,
        "trainer_cpu_ms_per_step": (cpu1 - cpu0) / steps * 1e3,
        "main_thread_cpu_ms_per_step": threads["main"] / steps * 1e3,
        "mxnet_threads_cpu_ms_per_step": threads["mxnet_threads"] / steps * 1e3,
        "writer_threads_cpu_ms_per_step": threads["writer_threads"] / steps * 1e3,
        **extra,
    }


# -- the benchmark ----------------------------------------------------------------------
def _ratios(r: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> None:
    """A run's step time over the mean of the two baseline runs around it."""
    base_mean = (before["step_ms_mean"] + after["step_ms_mean"]) / 2
    base_p50 = (before["step_ms_p50"] + after["step_ms_p50"]) / 2
    r["ratio"] = r["step_ms_mean"] / base_mean
    r["ratio_incl_drain"] = r["step_ms_incl_drain"] / base_mean
    r["ratio_p50"] = r["step_ms_p50"] / base_p50


def _worker_run(kind: str, pname: str, steps: int, base_steps: int) -> dict[str, Any]:
    """In mxboard's environment: baseline, the writer, baseline, in this one process."""
    model = Model()
    profile = PROFILES[pname]
    before = _one_run(model, "none", profile, base_steps)
    r = _one_run(model, kind, profile, steps)
    _ratios(r, before, _one_run(model, "none", profile, base_steps))
    r["baseline"] = "its own, in mxboard's environment"
    return r


def _available(writers: tuple[str, ...]) -> tuple[list[str], list[dict[str, Any]]]:
    """The writers importable here, and a record for each one skipped."""
    available, skipped = [], []
    for kind in writers:
        if kind == "none":
            available.append(kind)
            continue
        if in_worker(kind):
            import mxboard_env

            python, why = mxboard_env.ensure()
            if python is not None:
                available.append(kind)
                continue
            rec = {"bench": "steptime", "writer": kind, "skipped": f"mxboard's environment: {why}"}
            emit(rec)
            skipped.append(rec)
            continue
        try:
            with tempfile.TemporaryDirectory() as d:
                _open_writer(kind, d).close()
            available.append(kind)
        except ImportError as exc:
            rec = {"bench": "steptime", "writer": kind, "skipped": f"not importable here ({exc})"}
            emit(rec)
            skipped.append(rec)
    return available, skipped


def run(
    quick: bool = False,
    repeats: int | None = None,
    writers: tuple[str, ...] = WRITERS,
    profiles: tuple[str, ...] = tuple(PROFILES),
) -> list[dict[str, Any]]:
    """Every writer under every profile, interleaved; one JSON line per (profile, writer)."""
    if repeats is None:
        repeats = 1 if quick else 5
    load_start = os.getloadavg()
    model = Model()
    available, records = _available(writers)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    steps_of: dict[tuple[str, str], int] = {}
    t_start = time.perf_counter()
    others = [k for k in available if k != "none"]
    for _ in range(repeats):
        for pname in profiles:
            profile = PROFILES[pname]

            def steps_for(kind: str, profile: Profile = profile) -> int:
                if quick:
                    return profile.quick_steps
                return profile.slow_steps if kind in SLOW_WRITERS else profile.steps

            # Each writer's run sits between two baseline runs (none A none B none ...) and is
            # compared with their mean: slow drift in the machine's load cancels out.
            before = _one_run(model, "none", profile, steps_for("none"))
            runs.setdefault((pname, "none"), []).append(before)
            steps_of[pname, "none"] = steps_for("none")
            for kind in others:
                steps_of[pname, kind] = steps_for(kind)
                if in_worker(kind):  # its ratios are to baseline runs in its own process
                    import mxboard_env

                    args = (pname, str(steps_for(kind)), str(steps_for("none")))
                    r = mxboard_env.run_worker("bench_steptime", *args)
                else:
                    r = _one_run(model, kind, profile, steps_for(kind))
                after = _one_run(model, "none", profile, steps_for("none"))
                runs[pname, "none"].append(after)
                if "ratio" not in r:
                    _ratios(r, before, after)
                runs.setdefault((pname, kind), []).append(r)
                before = after
    env = {
        "bench": "steptime_environment",
        "model_params": model.n_params,
        "param_arrays": len(model.params),
        "batch": BATCH,
        "sync": "mx.nd.waitall() at the end of every step, every variant",
        "repeats": repeats,
        "seconds": round(time.perf_counter() - t_start, 1),
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    emit(env)
    records.append(env)
    keys = ["step_ms_mean", "step_ms_p50", "step_ms_p90", "step_ms_incl_drain", "drain_ms", "close_ms"]
    keys += ["log_calls_ms_per_step"]
    keys += ["trainer_cpu_ms_per_step", "main_thread_cpu_ms_per_step", "mxnet_threads_cpu_ms_per_step"]
    keys += ["writer_threads_cpu_ms_per_step", "sidecar_cpu_ms_per_step", "blocked_seconds", "dropped"]
    keys += ["arena_prefault_ms"]
    for (pname, kind), rs in runs.items():
        profile = PROFILES[pname]
        if kind == "none":
            for r in rs:
                r["ratio"] = r["ratio_incl_drain"] = r["ratio_p50"] = 1.0
        rec: dict[str, Any] = {
            "bench": f"steptime_{pname}",
            "profile": pname,
            "writer": kind,
            "steps": steps_of[pname, kind],
            "repeats": len(rs),
            "hist_every": profile.hist_every,
            "image_every": profile.image_every,
        }
        for key in keys:
            vals = [r[key] for r in rs if r.get(key) is not None]
            if vals:
                rec[key] = round(statistics.median(vals), 3)
        rec["overhead_pct"] = round((statistics.median(r["ratio"] for r in rs) - 1) * 100, 2)
        rec["overhead_incl_drain_pct"] = round((statistics.median(r["ratio_incl_drain"] for r in rs) - 1) * 100, 2)
        rec["overhead_p50_pct"] = round((statistics.median(r["ratio_p50"] for r in rs) - 1) * 100, 2)
        rec["overhead_pct_runs"] = [] if kind == "none" else [round((r["ratio"] - 1) * 100, 2) for r in rs]
        cpu = rec.get("trainer_cpu_ms_per_step", 0.0) + rec.get("sidecar_cpu_ms_per_step", 0.0)
        rec["total_cpu_ms_per_step"] = round(cpu, 3)
        if kind == "mxsidecar":
            # Judged on the stricter figure: the drain is work the sidecar had not yet done.
            rec["target_pct"] = TARGET_PCT[pname]
            rec["target_met"] = max(rec["overhead_pct"], rec["overhead_incl_drain_pct"]) <= TARGET_PCT[pname]
        emit(rec)
        records.append(rec)
    return records


VARIANTS = {
    "mxsidecar:roomy": f"max_queue={ROOMY['max_queue']}, slab_mb={ROOMY['slab_mb']}: never blocks within a run",
    "mxsidecar:paused": "roomy, and the sidecar suspended (SIGSTOP) during the loop: the trainer's side alone",
    "mxsidecar:numpy": "asnumpy()/asscalar() in the caller, then mxsidecar's memcpy path",
    "mxsidecar:nice10": "sched_idle=False: nice 10 under the normal policy (the default before SCHED_IDLE)",
    "mxsidecar:nice0": "sched_idle=False, nice=0: the sidecar competes as an equal",
    "mxsidecar:nice19": "sched_idle=False, nice=19",
    "mxsidecar:pin1": "defaults, and the sidecar pinned to CPU 1",
}


def markdown(records: list[dict[str, Any]]) -> str:
    """The step-time table (for results.md)."""
    rows = [r for r in records if str(r.get("bench", "")).startswith("steptime_") and "writer" in r]
    if not rows:
        return ""
    env = next((r for r in records if r.get("bench") == "steptime_environment"), {})
    lines = [
        f"Step time of a hybridized Gluon CNN ({env.get('model_params', 0):,} parameters in "
        f"{env.get('param_arrays', '?')} arrays, batches of {BATCH} 1x28x28, CPU), `mx.nd.waitall()` ending every "
        f"step in every variant; medians over {env.get('repeats', '?')} interleaved repeats "
        f"(load average {env.get('loadavg_start', ['?'])[0]} at the start, {env.get('loadavg_end', ['?'])[0]} "
        f"at the end, {env.get('cpus', '?')} CPUs). heavy: 3 scalars + 16 histograms every step, a 16-image grid "
        "every 50; typical: 3 scalars every step, 16 histograms every 20, a 16-image grid every 100. "
        "Overhead: a run's mean step time over the mean of the two no-logging runs around it, − 1 (median over "
        "repeats; min…max: each repeat's); incl. drain also charges the "
        "`flush()` after the loop (work the writer had deferred: for mxsidecar, what the sidecar had not yet "
        "written) to the steps; close ms is the fixed cost of `close()` after it. CPU ms per step: the "
        "training process (its training thread / MXNet's native threads / the writer's own threads) and the "
        "sidecar process.",
        "",
        "| profile | writer | steps | step ms mean | step ms p50 | overhead | repeats min…max | incl. drain "
        "| drain ms | close ms "
        "| in add_* calls ms/step | trainer CPU ms/step (main / mxnet / writer thr.) | sidecar CPU ms/step | target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        side = r.get("sidecar_cpu_ms_per_step")
        target = ""
        if "target_pct" in r:
            target = f"≤ +{r['target_pct']:g} %: {'met' if r['target_met'] else '**missed**'}"
        base = r["writer"] == "none"
        over = "-" if base else f"{r['overhead_pct']:+.1f} %"
        over_drain = "-" if base else f"{r['overhead_incl_drain_pct']:+.1f} %"
        runs = r["overhead_pct_runs"]
        spread = "-" if base else f"{min(runs):+.1f}…{max(runs):+.1f} %"
        cpu = (
            f"{r['trainer_cpu_ms_per_step']:.1f} ({r['main_thread_cpu_ms_per_step']:.1f} / "
            f"{r['mxnet_threads_cpu_ms_per_step']:.1f} / {r['writer_threads_cpu_ms_per_step']:.1f})"
        )
        lines.append(
            f"| {r['profile']} | {r['writer']} | {r['steps']} | {r['step_ms_mean']:.2f} | {r['step_ms_p50']:.2f} "
            f"| {over} | {spread} | {over_drain} | {r.get('drain_ms', 0):.0f} | {r.get('close_ms', 0):.0f} "
            f"| {r['log_calls_ms_per_step']:.2f} | {cpu} "
            f"| {'-' if side is None else f'{side:.1f}'} | {target} |"
        )
    for kind, what in VARIANTS.items():
        if any(r["writer"] == kind for r in rows):
            lines.append(f"\n`{kind}`: {what}.")
    for r in records:
        if r.get("bench") == "steptime" and "skipped" in r:
            lines.append(f"\n{r['writer']}: skipped, {r['skipped']}.")
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], path: str) -> str | None:
    """A PNG bar chart of the overhead per writer and profile (matplotlib, Agg); its path."""
    every = [r for r in records if str(r.get("bench", "")).startswith("steptime_") and "writer" in r]
    rows = [r for r in every if r["writer"] != "none"]
    if not rows:
        return None
    baseline = {r["profile"]: r["step_ms_mean"] for r in every if r["writer"] == "none"}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = [p for p in PROFILES if any(r["profile"] == p for r in rows)]
    writers = list(dict.fromkeys(r["writer"] for r in rows))
    colors = {"mxsidecar": "tab:green", "tensorboardX": "tab:red", "inline": "tab:orange", "mxboard": "tab:purple"}
    fig, axes = plt.subplots(1, len(profiles), figsize=(6 * len(profiles), 0.9 + 0.75 * len(writers)), squeeze=False)
    for ax, pname in zip(axes[0], profiles):
        by_writer = {r["writer"]: r for r in rows if r["profile"] == pname}
        names = [w for w in writers if w in by_writer]
        loop = [by_writer[w]["overhead_pct"] for w in names]
        drain = [by_writer[w]["overhead_incl_drain_pct"] for w in names]
        ys = np.arange(len(names))
        color = [colors.get(w.split(":")[0], "tab:gray") for w in names]
        ax.barh(ys - 0.2, loop, height=0.4, color=color, label="training loop")
        ax.barh(ys + 0.2, drain, height=0.4, color=color, alpha=0.4, hatch="//", label="loop + drain")
        for y, a, b in zip(ys, loop, drain):
            for dy, value in ((-0.2, a), (0.2, b)):
                ax.annotate(f"{value:+.1f} %", (max(value, 0), y + dy), xytext=(4, 0), textcoords="offset points",
                            va="center", fontsize=8)  # fmt: skip
        ax.set_yticks(ys, names)
        target = TARGET_PCT.get(pname)
        if target is not None:
            ax.axvline(target, color="tab:green", linestyle="--", linewidth=1)
            ax.text(target, 1.0, f" mxsidecar's target +{target:g} %", color="tab:green", fontsize=8, va="bottom",
                    transform=ax.get_xaxis_transform())  # fmt: skip
        values = loop + drain
        hi = max([*values, target or 0.0, 1.0])
        if hi > 50 * max(1.0, min(abs(v) for v in values)):
            ax.set_xscale("symlog", linthresh=10)
            ax.set_xlim(min(0.0, min(values) * 1.2), hi * 4)
        else:
            ax.set_xlim(min(0.0, min(values) * 1.2), hi * 1.3)
        ax.invert_yaxis()
        ax.set_title(f"{pname} profile (no logging: {baseline.get(pname, float('nan')):.1f} ms/step)", fontsize=10,
                     pad=14)  # fmt: skip
        ax.set_xlabel("step-time overhead vs. no logging, % (median of repeats)")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")  # beside the short mxsidecar bars, clear of the long ones
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    import argparse
    import sys

    if sys.argv[1:2] == ["--worker"]:  # mxboard_env.run_worker: PROFILE STEPS BASELINE_STEPS
        from common import worker_result

        worker_result(_worker_run("mxboard", sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        sys.exit(0)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.dirname(here)]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one repeat, short runs")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--diagnose", action="store_true",
                    help="heavy profile, mxsidecar variants only: where its overhead goes")  # fmt: skip
    ap.add_argument("--out", default=os.path.join(here, "results"))
    ap.add_argument("--writers", default=",".join(WRITERS),
                    help="comma-separated subset, e.g. none,mxsidecar (none is always run)")  # fmt: skip
    ap.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated subset: heavy,typical")
    args = ap.parse_args()
    if args.diagnose:
        records = run(quick=args.quick, repeats=args.repeats or 3, writers=DIAGNOSE, profiles=("heavy",))
    else:
        writers = tuple(dict.fromkeys(["none", *args.writers.split(",")]))
        records = run(quick=args.quick, repeats=args.repeats, writers=writers, profiles=tuple(args.profiles.split(",")))
    print(markdown(records))
    os.makedirs(args.out, exist_ok=True)
    name = "steptime_diagnose.png" if args.diagnose else "steptime_overhead.png"
    print(plot(records, os.path.join(args.out, name)))
