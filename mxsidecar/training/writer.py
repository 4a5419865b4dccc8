"""``SidecarWriter``: the public API.  It validates, then hands over; nothing more.

Each ``add_*`` checks its arguments in the caller's thread (a ``ValueError`` or
``TypeError`` naming the argument, before anything is enqueued) and passes the value
to the :class:`~mxsidecar.training.pipeline.Pipeline`.  Encoding, protobuf and files belong
to the sidecar process; this module imports neither Pillow, the encoders nor mxnet.
"""

from __future__ import annotations

import json
import os
import threading
from types import TracebackType
from typing import Any

from ..wire.descriptors import Kind
from . import arguments as v
from . import ranks as ranks_mod
from . import remote, workers
from .backpressure import ON_FULL, OnFull
from .kinds._base import _now
from .kinds.audio import AudioCalls
from .kinds.custom_scalars import CustomScalarsCalls
from .kinds.embedding import EmbeddingCalls
from .kinds.graph import GraphCalls
from .kinds.histogram import HistogramCalls
from .kinds.hparams import HParamsCalls
from .kinds.image import ImageCalls
from .kinds.pr_curve import PrCurveCalls
from .kinds.scalar import ScalarCalls
from .kinds.text import TextCalls
from .kinds.video import VideoCalls
from .pipeline import Pipeline

__all__ = ["SidecarWriter", "SummaryWriter"]


def _nothing(*args: Any, **kwargs: Any) -> None:
    """Every call of a writer on a rank that does not write (``ranks='zero'``, rank > 0)."""
    return None


class SidecarWriter(
    ScalarCalls,
    HistogramCalls,
    ImageCalls,
    VideoCalls,
    AudioCalls,
    TextCalls,
    EmbeddingCalls,
    PrCurveCalls,
    GraphCalls,
    HParamsCalls,
    CustomScalarsCalls,
):
    """Writes TensorBoard event files from a sidecar process, at a memcpy's cost per call.

    Parameters
    ----------
    logdir : str or os.PathLike
        Directory of this run's event files; created if missing.  Must not be a file.
        A leading ``~`` is the user's home directory, as in a shell.  A URL
        (``s3://bucket/prefix``, ``gs://...``, any fsspec URL) is written through a
        local spool: event files are sealed every ``flush_secs`` (or at 64 MB) and
        each is uploaded whole, once (README, "Remote log directories").  The URL is
        checked here by writing a probe object: an unknown scheme, a missing extra
        (``pip install 'mxsidecar[s3]'``), bucket or credentials raise ``ValueError``.
    storage_options : dict or None
        For a URL logdir: keyword arguments for its fsspec file system (JSON-serializable).
    spool_dir : str or None
        For a URL logdir: the local directory written before uploading (kept after the
        upload, a local copy); by default one per URL under ``~/.cache/mxsidecar/spool``.
    max_queue : int, default 1024
        Most items logged but not yet written by the sidecar.  When reached,
        ``on_full`` decides.  Bounds memory, with ``slab_mb``.
    flush_secs : float, default 120
        How often the sidecar fsyncs its files.  Events reach the file (the kernel:
        visible to TensorBoard, safe if a process dies) as soon as the sidecar has
        them; fsync guards against a machine crash.  ``close()`` fsyncs too.
    filename_suffix : str, default ''
        Appended to every event file name.
    slab_mb : float, default 64
        Size of the shared-memory arena that carries arrays to the sidecar (in
        /dev/shm).  An array larger than this can never be logged.
    on_full : {'block', 'drop'}, default 'block'
        ``'block'``: wait up to ``block_timeout`` seconds for room, then raise
        :class:`~mxsidecar.BackpressureTimeout`.  ``'drop'``: drop the new item and
        count it (``stats()['dropped']``, and one warning at close).
    block_timeout : float or None, default 60
        Longest wait under ``on_full='block'``; None waits as long as the sidecar lives.
    purge_step : int or None
        Resume a crashed run: TensorBoard hides every event of this run with a step
        >= ``purge_step`` written before this writer (a SessionLog START).
    nice : int, default 10
        Scheduling niceness added to the sidecar, so training wins the CPU.
    sched_idle : bool, default True
        On Linux, run the sidecar under the ``SCHED_IDLE`` policy: any thread of the
        training process that wakes up preempts it at once, so it works in the gaps
        and a training step barely feels it (where the policy is unavailable, ``nice``
        alone applies).  While training keeps every core busy the sidecar's backlog
        then grows and ``on_full`` decides; False gives it the plain share of its
        ``nice``.  ``stats()['sidecar']['scheduling']`` says what is in effect.
    cpu_affinity : sequence of int or None
        CPUs the sidecar is pinned to; None (the default) pins it to none.  An empty
        sequence, or a CPU this process may not run on, raises ``ValueError``.
    on_error : {'raise', 'restart'}, default 'raise'
        When the sidecar dies (crash, kill, I/O error): ``'raise'`` makes the next
        ``add_*``, ``flush()`` or ``close()`` raise :class:`~mxsidecar.SidecarError`
        with its traceback or signal; ``'restart'`` starts a new sidecar on a new
        event file and goes on, counting what was lost (``stats()['lost']``), up to
        ``max_restarts`` times, then raises.
    max_restarts : int, default 3
        Restarts allowed under ``on_error='restart'``.
    stats_secs : float or None
        If set, the writer's own counters are logged every ``stats_secs`` seconds as
        scalars ``mxsidecar/<name>`` (queued, in_flight, dropped, rejected, lost,
        blocked_seconds, arena_used_mb, sidecar_cpu_seconds, sidecar_rss_mb), at step =
        seconds since the writer started, by a background thread.
    verbose : bool, default False
        Print one line at close: how many of the values logged (with ``add_*``, and
        ``stats_secs``' own scalars) were written, dropped, rejected and lost.
    ranks : {'zero', 'all'}, default 'zero'
        Which processes of a distributed job write.  ``'zero'``: rank 0 writes as a
        single process would; every other rank's writer costs nothing (no sidecar, no
        shared memory, no directory, no file) and each of its calls returns at once.
        ``'all'``: rank *k* writes the run ``<logdir>/rank_<k>``, so TensorBoard draws
        one line per rank for each tag.  A ps-lite server or scheduler process
        (``DMLC_ROLE``) never writes.
    rank, world_size : int or None
        This process's rank and the number of trainers.  When not given, they come from
        ``kvstore``, else from the launcher's environment (Horovod, Open MPI,
        ``RANK``/``WORLD_SIZE``, BytePS, SLURM); with none of those, the process is
        alone and writes.  A rank outside ``[0, world_size)``, or launcher variables
        that disagree, raise ``ValueError`` here.
    kvstore : mx.kv.KVStore or None
        A kvstore (``mx.kv.create('dist_sync')``): its ``rank`` and ``num_workers``.
    share_sidecar : bool, default True
        Writers on one machine that log to the same local ``logdir`` (local ranks,
        DataLoader workers, other scripts) share one sidecar process and write one
        event file per run: the first starts it, the others join it, and it exits
        when the last has closed or died.  Each writer keeps its own shared memory,
        queue, ``on_full`` and ``stats()``; the sidecar's scheduling (``nice``,
        ``sched_idle``, ``cpu_affinity``) is its starter's.  False: a sidecar of this
        writer's own, on an event file of its own.  A URL logdir's writer always has
        its own.

    Use it as a context manager, or call :meth:`close`; writers left open are
    closed at interpreter exit.  ``SummaryWriter`` is the same class, for mxboard
    users.
    """

    def __init__(
        self,
        logdir: str = "logs",
        max_queue: int = 1024,
        flush_secs: float = 120.0,
        filename_suffix: str | None = "",
        *,
        slab_mb: float = 64,
        on_full: OnFull = "block",
        block_timeout: float | None = 60.0,
        purge_step: int | None = None,
        nice: int = 10,
        sched_idle: bool = True,
        cpu_affinity: list[int] | tuple[int, ...] | None = None,
        on_error: str = "raise",
        max_restarts: int = 3,
        stats_secs: float | None = None,
        verbose: bool = False,
        ranks: str = "zero",
        rank: int | None = None,
        world_size: int | None = None,
        kvstore: Any = None,
        storage_options: dict[str, Any] | None = None,
        spool_dir: str | None = None,
        share_sidecar: bool = True,
    ) -> None:
        args = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self._placement = ranks_mod.resolve(ranks, rank, world_size, kvstore)
        # What a pickled writer is rebuilt from (workers.reconnect): the placement as
        # resolved here (a kvstore does not travel), without what applies once.
        args.update(kvstore=None, purge_step=None, stats_secs=None)
        if self._placement.rank is not None:
            args.update(rank=self._placement.rank, world_size=self._placement.world_size)
        self._args = args
        run = self._placement.run
        # _logdir: the local directory the sidecar writes (a URL's spool); _shown: what the user named.
        self._shown, self._logdir, self._remote = remote.resolve(
            logdir, storage_options, spool_dir, run, self._placement.writes
        )
        max_queue = v.check_positive(max_queue, "max_queue", integer=True)
        flush_secs = v.check_positive(flush_secs, "flush_secs")
        slab_mb = v.check_positive(slab_mb, "slab_mb")
        block_timeout = v.check_positive(block_timeout, "block_timeout", allow_none=True)
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, got {on_full!r}")
        if on_error not in ("raise", "restart"):
            raise ValueError(f"on_error must be 'raise' or 'restart', got {on_error!r}")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
        if filename_suffix is None:
            filename_suffix = ""
        if not isinstance(filename_suffix, str):
            raise TypeError(f"filename_suffix must be a str, got {type(filename_suffix).__name__}")
        if "/" in filename_suffix or "\0" in filename_suffix or len(filename_suffix.encode()) > 100:
            raise ValueError(f"filename_suffix must be at most 100 bytes, without '/' or NUL, got {filename_suffix!r}")
        if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
            raise ValueError(f"nice must be an int from 0 to 19, got {nice!r}")
        if not isinstance(sched_idle, bool):
            raise TypeError(f"sched_idle must be a bool, got {type(sched_idle).__name__}")
        if not isinstance(share_sidecar, bool):
            raise TypeError(f"share_sidecar must be a bool, got {type(share_sidecar).__name__}")
        cpus = v.check_cpus(cpu_affinity)
        args["cpu_affinity"] = list(cpus) if cpu_affinity is not None else None  # a generator would not pickle
        purge = None if purge_step is None else v.check_step(purge_step, "purge_step")
        stats_secs = v.check_positive(stats_secs, "stats_secs", allow_none=True)
        self._verbose = bool(verbose)
        self._start_time = _now()
        self._tags: set[str] = set()  # tags already validated: the fast path is a set lookup
        self._runs: set[str] = set()  # run directories already checked
        self._hparams_session = None  # add_hparams: what this run declared first
        self._config: dict[str, Any] = {
            "max_queue": max_queue,
            "slab_bytes": int(slab_mb * 2**20),
            "on_full": on_full,
            "block_timeout": block_timeout,
            "flush_secs": flush_secs,
            "filename_suffix": filename_suffix,
            "nice": nice,
            "cpus": cpus,
            "sched_idle": sched_idle,
            "on_error": on_error,
            "max_restarts": max_restarts,
            "remote": self._remote,
            # A local logdir's node sidecar serves the logdir the user named; our runs
            # are ``run`` (rank_<k>) in it.  A URL logdir's sidecar uploads its own spool.
            "prefix": run if share_sidecar and self._remote is None else "",
            "share": share_sidecar and self._remote is None,
        }
        self._sidecar_dir = self._logdir
        if self._config["prefix"]:
            self._sidecar_dir = os.path.dirname(self._logdir)
        self._exported_from: dict[str, int] = {}  # event file -> bytes already exported or cleared
        self._closed_files: list[str] = []  # event files of the pipelines closed before reopen()
        if not self._placement.writes:
            # Every argument was checked as on a writing rank; past this point the writer
            # costs nothing: no directory, no shared memory, no sidecar, and each call
            # is an instance attribute that returns at once (shadowing the class's).
            for name in _SILENCED:
                setattr(self, name, _nothing)
            self._pipe = None  # type: ignore[assignment]
            return
        os.makedirs(self._logdir, exist_ok=True)
        self._pipe = Pipeline(self._sidecar_dir, **self._config)
        if self._config["share"]:
            workers.track(self)  # a forked child logs through the node's sidecar
        if purge is not None:
            self._pipe.purge(purge, _now())
        if stats_secs is not None:
            threading.Thread(target=self._log_stats, args=(stats_secs,), name="mxsidecar-stats", daemon=True).start()

    def _join_after_fork(self) -> Pipeline:
        """In a forked child, at the first call: a pipeline of this process's own,
        joined to the node's sidecar (training/workers.py)."""
        pipe = Pipeline(self._sidecar_dir, **self._config)
        self._pipe = pipe
        self._closed_files = []  # the parent's files are the parent's
        workers.joined_in_child(pipe)
        return pipe

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled (spawn, forkserver, a pool's task argument): rebuilt from its
        arguments in the other process, where it joins the node's sidecar."""
        return (workers.reconnect, (self._args,))

    def _log_stats(self, every: float) -> None:
        """The stats_secs thread: stops with the writer (or its first error)."""
        pipe = self._pipe
        stop = threading.Event()
        while not stop.wait(every):
            if pipe.closed or pipe is not self._pipe:
                return
            try:
                s = pipe.stats()
                side = s["sidecar"] or {}
                values = {
                    "queued": s["queued"],
                    "in_flight": s["in_flight"],
                    "dropped": sum(s["dropped"].values()),
                    "rejected": s["rejected"],
                    "lost": s["lost"],
                    "blocked_seconds": s["blocked_seconds"],
                    "arena_used_mb": s["arena_used_bytes"] / 2**20,
                    "sidecar_cpu_seconds": side.get("cpu_seconds", 0.0),
                    "sidecar_rss_mb": side.get("rss_bytes", 0) / 2**20,
                }
                now = _now()
                step = int(now - self._start_time)
                for name, x in values.items():
                    pipe.submit(Kind.SCALAR, f"mxsidecar/{name}", step, now, number=float(x))
            except Exception:
                return  # closed or failed: the error reaches the user through their own calls

    # -- lifecycle -----------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Return once everything logged before this call is in the event files.

        Raises :class:`~mxsidecar.SidecarError` if the sidecar died, and
        ``TimeoutError`` if ``timeout`` seconds pass first.
        """
        self._pipe.flush(timeout)

    def close(self, timeout: float | None = 120.0) -> None:
        """Write everything logged, fsync, stop the sidecar, free the shared memory.

        Idempotent.  Raises the sidecar's error if it failed and that was not
        raised before.  A sidecar still busy after ``timeout`` seconds is killed.
        """
        self._pipe.close(timeout)
        if self._verbose:
            c = self._pipe.item_counts()  # values logged only: flush(), stats() and close() are not items
            print(
                f"mxsidecar: {self._shown}: {c['written']} items written, {c['dropped']} dropped, "
                f"{c['rejected']} rejected, {c['lost']} lost"
            )

    def stats(self) -> dict[str, Any]:
        """Counters of this writer and its sidecar.

        Keys: ``queued`` (logged, not yet handled), ``dropped`` (per kind),
        ``dropped_by_tag``, ``rejected``, ``blocked_seconds``, ``arena_bytes``,
        ``arena_used_bytes``, ``sidecar_pid``, ``last_error``, and ``sidecar`` (its own
        counters: ``written`` per kind, ``bytes_written``, ``files``, ``cpu_seconds``,
        ``rss_bytes``, ``scheduling`` (its policy, niceness and CPUs), ``producers`` (writers it
        serves now; ``shared``: whether others may join it; ``producers_served``,
        ``producers_ended_without_close``: every writer it served, and those that died), ``uploads`` for a URL
        logdir (``pending``, ``uploaded``, ``bytes_sent``, ``failed_attempts``, ``last_error``); None once it is gone),
        and ``files``: every event file this writer has created, across :meth:`reopen`
        and restarted sidecars (what :meth:`export_scalars` reads).
        ``rank``, ``world_size``, ``rank_source`` and ``writes`` say where this process
        stands among the trainers (``ranks``); a writer that does not write reports those alone.
        """
        placement = {
            "rank": self._placement.rank,
            "world_size": self._placement.world_size,
            "rank_source": self._placement.source,
            "writes": self._placement.writes,
        }
        if self._pipe is None:
            return placement
        return {**self._pipe.stats(), "files": self._event_files(), **placement}

    def reopen(self) -> None:
        """After :meth:`close`, start a new sidecar writing a new event file (mxboard's API)."""
        if not self._pipe.closed:
            return
        self._closed_files += self._pipe.event_files()
        self._pipe = Pipeline(self._sidecar_dir, **self._config)

    # -- mxboard's scalar export ---------------------------------------------------
    def _event_files(self) -> list[str]:
        """Every event file this writer's sidecars created, oldest first.  Each sidecar
        names each file to the pipeline as it creates it (``Opened``), so the list spans
        restarted sidecars, and the writer keeps the lists of pipelines it reopened."""
        return self._closed_files + self._pipe.event_files()

    def export_scalars(self, path: str) -> None:
        """Write every scalar this writer logged (since :meth:`clear_scalar_dict`) as
        JSON ``{run_dir/tag or group run dir: [[wall_time, step, value], ...]}``, mxboard's
        format.  mxboard kept every scalar in RAM for this ("it explodes your RAM");
        here they are read back, at the time of the call, from every event file this
        writer wrote: across :meth:`reopen` and restarted sidecars, and after :meth:`close`.
        """
        if not self._pipe.closed:
            self.flush()  # then every file holding what was logged is known (see Opened)
        out = self._read_scalars(advance=False)
        with open(path, "w") as f:
            json.dump(out, f)

    def clear_scalar_dict(self) -> None:
        """Forget the scalars logged so far, for :meth:`export_scalars` (mxboard's API)."""
        if not self._pipe.closed:
            self.flush()
        self._read_scalars(advance=True)

    def _read_scalars(self, advance: bool) -> dict[str, list[list[float]]]:
        from ..formats.proto import event_pb2
        from ..formats.records import iter_records

        out: dict[str, list[list[float]]] = {}
        for path in self._event_files():
            start = self._exported_from.get(path, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            run = os.path.relpath(os.path.dirname(path), self._logdir)
            # A run's file may be shared with other writers (share_sidecar): export only
            # what this one logged, its tags and its add_scalars runs (and stats_secs').
            mine = not self._config["share"] or run in self._runs
            consumed = 0
            for rec in iter_records(data, strict=False):
                consumed = rec.offset + len(rec.data) + 16
                ev = event_pb2.Event.FromString(rec.data)
                for value in ev.summary.value:
                    if not (mine or value.tag in self._tags or value.tag.startswith("mxsidecar/")):
                        continue
                    if value.tensor.dtype == 1 and len(value.tensor.float_val) == 1:  # DT_FLOAT scalar
                        key = os.path.join(self._shown, run if run != "." else value.tag)
                        out.setdefault(key, []).append([ev.wall_time, ev.step, value.tensor.float_val[0]])
            if advance:
                self._exported_from[path] = start + consumed
        return out

    @property
    def logdir(self) -> str:
        return self._shown

    def get_logdir(self) -> str:
        """The run directory (mxboard's name for :attr:`logdir`)."""
        return self._shown

    def __enter__(self) -> SidecarWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.close()
        except Exception:
            if exc is None:
                raise
            # An exception is already leaving the block: clean up, keep that one.


SummaryWriter = SidecarWriter

# What a writer on a rank that does not write answers with _nothing: every add_*, and
# whatever would touch a sidecar or a file.  stats(), logdir and the context manager
# stay the class's.
_SILENCED = (
    *tuple(sorted(n for n in dir(SidecarWriter) if n.startswith("add_"))),
    "flush",
    "close",
    "reopen",
    "export_scalars",
    "clear_scalar_dict",
)
