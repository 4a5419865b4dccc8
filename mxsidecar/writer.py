"""``SidecarWriter``: the public API.  It validates, then hands over; nothing more.

Each ``add_*`` checks its arguments in the caller's thread (a ``ValueError`` or
``TypeError`` naming the argument, before anything is enqueued) and passes the value
to the :class:`~mxsidecar.pipeline.Pipeline`.  Encoding, protobuf and files belong
to the sidecar process; this module imports neither Pillow, the encoders nor mxnet.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from . import validate as v
from .backpressure import ON_FULL, OnFull
from .capture import copy_numpy, is_ndarray, ndarray_info
from .messages import Kind
from .pipeline import Pipeline

__all__ = ["SidecarWriter", "SummaryWriter"]

_now = time.time


class SidecarWriter:
    """Writes TensorBoard event files from a sidecar process, at a memcpy's cost per call.

    Parameters
    ----------
    logdir : str or os.PathLike
        Directory of this run's event files; created if missing.  Must not be a file.
    max_queue : int, default 1024
        Most items logged but not yet written by the sidecar.  When reached,
        ``on_full`` decides.  Bounds memory, with ``slab_mb``.
    flush_secs : float, default 120
        The sidecar writes buffered events to the file at least this often.
        ``flush()`` and ``close()`` write at once.
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
    cpu_affinity : sequence of int or None
        CPUs the sidecar is pinned to.
    verbose : bool, default False
        Print one line with the counts of written and dropped items at close.

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
        cpu_affinity: list[int] | tuple[int, ...] | None = None,
        verbose: bool = False,
    ) -> None:
        self._logdir = v.check_logdir(logdir)
        max_queue = v.check_positive(max_queue, "max_queue", integer=True)
        flush_secs = v.check_positive(flush_secs, "flush_secs")
        slab_mb = v.check_positive(slab_mb, "slab_mb")
        block_timeout = v.check_positive(block_timeout, "block_timeout", allow_none=True)
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, got {on_full!r}")
        if filename_suffix is None:
            filename_suffix = ""
        if not isinstance(filename_suffix, str):
            raise TypeError(f"filename_suffix must be a str, got {type(filename_suffix).__name__}")
        if "/" in filename_suffix or "\0" in filename_suffix:
            raise ValueError(f"filename_suffix must not contain '/' or NUL, got {filename_suffix!r}")
        if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
            raise ValueError(f"nice must be an int from 0 to 19, got {nice!r}")
        cpus: tuple[int, ...] = ()
        if cpu_affinity is not None:
            if isinstance(cpu_affinity, (str, bytes)) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpu_affinity
            ):
                raise TypeError(f"cpu_affinity must be a sequence of CPU ids (ints >= 0), got {cpu_affinity!r}")
            cpus = tuple(cpu_affinity)
        purge = None if purge_step is None else v.check_step(purge_step, "purge_step")
        self._verbose = bool(verbose)
        self._tags: set[str] = set()  # tags already validated: the fast path is a set lookup
        os.makedirs(self._logdir, exist_ok=True)
        self._pipe = Pipeline(
            self._logdir,
            max_queue=max_queue,
            slab_bytes=int(slab_mb * 2**20),
            on_full=on_full,
            block_timeout=block_timeout,
            flush_secs=flush_secs,
            filename_suffix=filename_suffix,
            nice=nice,
            cpus=cpus,
        )
        if purge is not None:
            self._pipe.submit(Kind.SESSION_START, "", purge, _now())

    # -- helpers -------------------------------------------------------------
    def _tag(self, tag: Any, name: str = "tag") -> str:
        if type(tag) is str and tag in self._tags:
            return tag
        v.check_tag(tag, name)
        self._tags.add(tag)
        return str(tag)

    def _array(
        self,
        kind: Kind,
        tag: str,
        value: Any,
        step: int,
        wall: float,
        name: str,
        options: dict[str, Any] | None = None,
        min_size: int = 1,
        max_size: int | None = None,
    ) -> None:
        """Check an array argument and hand it to the pipeline (memcpy or engine copy)."""
        if is_ndarray(value):
            info = ndarray_info(value)
            if info.size < min_size:
                raise ValueError(f"{name} must have at least {min_size} element(s), got shape {info.shape}")
            if max_size is not None and info.size > max_size:
                raise ValueError(f"{name} must hold exactly one element, got an NDArray of shape {info.shape}")
            engine = self._pipe.engine
            self._pipe.submit_array(
                kind, tag, step, wall, shape=info.shape, dtype=info.dtype, nbytes=info.nbytes,
                fill=lambda buf, offset: engine.start(value, info, buf, offset), options=options,
            )  # fmt: skip
            return
        arr = v.check_array(value, name, min_size=min_size)
        self._pipe.submit_array(
            kind, tag, step, wall, shape=arr.shape, dtype=arr.dtype.name, nbytes=arr.nbytes,
            fill=lambda buf, offset: copy_numpy(buf, offset, arr), options=options,
        )  # fmt: skip

    # -- scalars and text ----------------------------------------------------
    def add_scalar(self, tag: str, value: Any, global_step: int | None = None, walltime: float | None = None) -> None:
        """Log a scalar.

        Parameters
        ----------
        tag : str
            Name of the series, e.g. ``'train/loss'``.
        value : int, float, numpy scalar, one-element numpy array, or NDArray
            The value; NaN and Inf are logged as such.  A one-element NDArray (a
            ``loss``) is copied by MXNet's engine once it is computed: no
            ``asscalar()``, no wait in this call.
        global_step : int >= 0 or None
            The x coordinate; None means 0.
        walltime : float or None
            Seconds since the epoch; None means now.
        """
        if type(tag) is not str or tag not in self._tags:
            self._tag(tag)
        if type(global_step) is not int or not 0 <= global_step <= v.INT64_MAX:
            global_step = v.check_step(global_step)
        wall = _now() if walltime is None else v.check_walltime(walltime)
        if type(value) is not float and is_ndarray(value):
            self._array(Kind.SCALAR, tag, value, global_step, wall, "value", max_size=1)
            return
        number = value if type(value) is float else v.check_number(value)
        self._pipe.submit(Kind.SCALAR, tag, global_step, wall, number=number)

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: Mapping[str, Any],
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log several scalars in one chart: each key becomes the run
        ``<logdir>/<main_tag>/<key>`` and the chart is ``main_tag``, as in tensorboardX,
        but with no file handle or thread per key in the training process.

        Parameters
        ----------
        main_tag : str
            Chart name; also a directory under ``logdir``, so it must stay inside it
            (no '..', no leading '/').
        tag_scalar_dict : mapping of str to number
            Series name -> value; each name is a directory under ``logdir/main_tag``.
        global_step, walltime
            As for :meth:`add_scalar`.
        """
        v.check_run_name(main_tag, "main_tag")
        if not isinstance(tag_scalar_dict, Mapping):
            raise TypeError(f"tag_scalar_dict must be a mapping of str to number, got {type(tag_scalar_dict).__name__}")
        step = v.check_step(global_step)
        wall = _now() if walltime is None else v.check_walltime(walltime)
        items = [
            (f"{main_tag}/{v.check_run_name(k, 'tag_scalar_dict key')}", v.check_number(x, f"tag_scalar_dict[{k!r}]"))
            for k, x in tag_scalar_dict.items()
        ]  # every key and value checked before the first is enqueued
        for run, number in items:
            self._pipe.submit(Kind.SCALAR, main_tag, step, wall, run=run, number=number)

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "default",
        walltime: float | None = None,
    ) -> None:
        """Log the distribution of ``values`` (TensorBoard's Histograms and Distributions tabs).

        Parameters
        ----------
        tag : str
            Name of the histogram series, e.g. ``'fc1/weight/grad'``.
        values : NDArray, numpy array, or sequence of numbers
            Any shape, any real dtype; flattened.  An NDArray is copied by MXNet's
            engine (any context, GPU included) and histogrammed in the sidecar.
            NaN and Inf are left out of the buckets and counted (``stats()``).
        global_step, walltime
            As for :meth:`add_scalar`.
        bins : 'default', int, sequence of edges, or a numpy rule name
            ``'default'``: TensorBoard's own buckets (edges +-1e-12 * 1.1**k), empty
            tails trimmed; an int: that many equal-width buckets over [min, max];
            increasing edges; or ``'auto'``, ``'fd'``, ``'doane'``, ``'scott'``,
            ``'stone'``, ``'rice'``, ``'sturges'``, ``'sqrt'`` (numpy's rules), capped at
            ``MAX_BINS`` buckets.
        """
        self._tag(tag)
        step = v.check_step(global_step)
        wall = _now() if walltime is None else v.check_walltime(walltime)
        options = {"bins": v.check_bins(bins)}
        self._array(Kind.HISTOGRAM, tag, values, step, wall, "values", options)

    def add_text(self, tag: str, text: str, global_step: int | None = None, walltime: float | None = None) -> None:
        """Log a Markdown string for TensorBoard's Text tab.

        Parameters
        ----------
        tag : str
            Name of the text series.
        text : str
            Markdown; tables, code and links render as Markdown does.
        global_step, walltime
            As for :meth:`add_scalar`.
        """
        self._tag(tag)
        v.check_text(text)
        step = v.check_step(global_step)
        wall = _now() if walltime is None else v.check_walltime(walltime)
        self._pipe.submit(Kind.TEXT, tag, step, wall, text=text)

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
            s = self._pipe
            print(
                f"mxsidecar: {self._logdir}: {s._done} items handled, {s.flow.dropped_total} dropped, "
                f"{sum(s.notices.values())} rejected"
            )

    def stats(self) -> dict[str, Any]:
        """Counters of this writer and its sidecar.

        Keys: ``queued`` (logged, not yet handled), ``dropped`` (per kind),
        ``dropped_by_tag``, ``rejected``, ``blocked_seconds``, ``arena_bytes``,
        ``arena_used_bytes``, ``sidecar_pid``, ``last_error``, and ``sidecar`` (its own
        counters: ``written`` per kind, ``bytes_written``, ``files``, ``cpu_seconds``,
        ``rss_bytes``; None once it is gone).
        """
        return self._pipe.stats()

    @property
    def logdir(self) -> str:
        return self._logdir

    def get_logdir(self) -> str:
        """The run directory (mxboard's name for :attr:`logdir`)."""
        return self._logdir

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
