"""``SidecarWriter``: the public API.  It validates, then hands over; nothing more.

Each ``add_*`` checks its arguments in the caller's thread (a ``ValueError`` or
``TypeError`` naming the argument, before anything is enqueued) and passes the value
to the :class:`~mxsidecar.pipeline.Pipeline`.  Encoding, protobuf and files belong
to the sidecar process; this module imports neither Pillow, the encoders nor mxnet.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import numpy as np

from ..wire.descriptors import Kind
from . import arguments as v
from .backpressure import ON_FULL, OnFull
from .capture import copy_numpy, is_ndarray, ndarray_info
from .pipeline import Part, Pipeline

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
        CPUs the sidecar is pinned to.
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
        sched_idle: bool = True,
        cpu_affinity: list[int] | tuple[int, ...] | None = None,
        on_error: str = "raise",
        max_restarts: int = 3,
        stats_secs: float | None = None,
        verbose: bool = False,
    ) -> None:
        self._logdir = v.check_logdir(logdir)
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
        cpus: tuple[int, ...] = ()
        if cpu_affinity is not None:
            if isinstance(cpu_affinity, (str, bytes)) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpu_affinity
            ):
                raise TypeError(f"cpu_affinity must be a sequence of CPU ids (ints >= 0), got {cpu_affinity!r}")
            cpus = tuple(cpu_affinity)
        purge = None if purge_step is None else v.check_step(purge_step, "purge_step")
        stats_secs = v.check_positive(stats_secs, "stats_secs", allow_none=True)
        self._verbose = bool(verbose)
        self._start_time = _now()
        self._tags: set[str] = set()  # tags already validated: the fast path is a set lookup
        self._runs: set[str] = set()  # run directories already checked
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
        }
        self._exported_from: dict[str, int] = {}  # event file -> bytes already exported or cleared
        self._files_seen: set[str] = set()
        os.makedirs(self._logdir, exist_ok=True)
        self._pipe = Pipeline(self._logdir, **self._config)
        if purge is not None:
            self._pipe.submit(Kind.SESSION_START, "", purge, _now())
        if stats_secs is not None:
            threading.Thread(target=self._log_stats, args=(stats_secs,), name="mxsidecar-stats", daemon=True).start()

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

    # -- helpers -------------------------------------------------------------
    def _tag(self, tag: Any, name: str = "tag") -> str:
        if type(tag) is str and tag in self._tags:
            return tag
        v.check_tag(tag, name)
        self._tags.add(tag)
        return str(tag)

    def _image_part(self, name: str, value: Any) -> Part:
        """An image-like argument (an image, a video, sprite thumbnails): an image dtype
        and, for numpy input, float values within [0, 1]; an NDArray's values are the
        sidecar's to check (invariant 5)."""
        part, arr = self._part(name, value, dtypes=v.check_image_dtype)
        if arr is not None:
            v.check_unit_range(arr, name, 0.0, 1.0)
        return part

    def _part(
        self, name: str, value: Any, *, min_size: int = 1, max_size: int | None = None, dtypes: Any = None
    ) -> tuple[Part, np.ndarray[Any, Any] | None]:
        """Check one array argument; return its Part (and the numpy array, for value checks).

        An NDArray is described from its metadata only (shape, dtype: no sync) and copied
        by the engine; anything else becomes a numpy array copied by memcpy.
        """
        if is_ndarray(value):
            info = ndarray_info(value)
            arr = None
            shape, dtype, nbytes, size = info.shape, info.dtype, info.nbytes, info.size
            engine = self._pipe.engine

            def fill(buf: Any, offset: int) -> Any:
                return engine.start(value, info, buf, offset)

        else:
            arr = v.check_array(value, name, min_size=0)
            shape, dtype, nbytes, size = arr.shape, arr.dtype.name, arr.nbytes, arr.size

            def fill(buf: Any, offset: int) -> Any:
                return copy_numpy(buf, offset, arr)

        if size < min_size:
            raise ValueError(f"{name} must have at least {min_size} element(s), got shape {shape}")
        if max_size is not None and size > max_size:
            raise ValueError(f"{name} must hold exactly one element, got an array of shape {shape}")
        if dtypes is not None:
            dtypes(dtype, name)
        return Part(name, tuple(shape), dtype, nbytes, fill), arr

    def _common(self, tag: Any, global_step: Any, walltime: Any) -> tuple[str, int, float]:
        return self._tag(tag), v.check_step(global_step), _now() if walltime is None else v.check_walltime(walltime)

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
        if type(value) is not float:
            if is_ndarray(value):
                part, _ = self._part("value", value, max_size=1)
                self._pipe.submit_array(Kind.SCALAR, tag, global_step, wall, [part])
                return
            if isinstance(value, (dict, list, tuple)):
                # mxboard: ('name', x) or {'name': x} draws named curves in one chart.
                if not isinstance(value, dict):
                    if len(value) != 2:
                        raise ValueError(f"value as a tuple or list must be (name, number), got {len(value)} items")
                    value = {value[0]: value[1]}
                self.add_scalars(tag, value, global_step, walltime)
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
        for run, _ in items:
            if run not in self._runs:  # one stat per new run, not per call
                v.check_run_path(self._logdir, run, "main_tag/tag_scalar_dict key")
                self._runs.add(run)
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
        tag, step, wall = self._common(tag, global_step, walltime)
        options = {"bins": v.check_bins(bins)}
        part, arr = self._part("values", values)
        if arr is not None:
            v.check_histogram_values(arr)
        self._pipe.submit_array(Kind.HISTOGRAM, tag, step, wall, [part], options=options)

    # -- images, video, audio -------------------------------------------------
    def add_image(
        self,
        tag: str,
        image: Any,
        global_step: int | None = None,
        dataformats: str | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log an image, or a batch of images as one grid (TensorBoard's Images tab).

        Parameters
        ----------
        tag : str
            Name of the image series.
        image : NDArray or numpy array
            float16/32/64 with values in [0, 1], or uint8; 1 (gray), 3 (RGB) or 4 (RGBA)
            channels.  A batch becomes one grid, ``ceil(sqrt(N))`` images per row with
            2-pixel gaps (mxboard's ``make_image_grid``).  Converted and PNG-encoded in
            the sidecar.
        global_step, walltime
            As for :meth:`add_scalar`.
        dataformats : 'CHW', 'HWC', 'HW', 'NCHW', 'NHWC' or None
            The layout of ``image``; None takes mxboard's by rank: HW, CHW, NCHW.
        """
        tag, step, wall = self._common(tag, global_step, walltime)
        part = self._image_part("image", image)
        fmt = v.check_dataformats(dataformats, part.shape)
        self._pipe.submit_array(Kind.IMAGE, tag, step, wall, [part], options={"dataformats": fmt})

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        """Log a batch of images as one grid (tensorboardX's name and argument order).

        ``img_tensor`` is NCHW (or NHWC with ``dataformats='NHWC'``); see :meth:`add_image`.
        """
        if dataformats not in ("NCHW", "NHWC"):
            raise ValueError(f"dataformats of add_images must be 'NCHW' or 'NHWC', got {dataformats!r}")
        self.add_image(tag, img_tensor, global_step, dataformats, walltime)

    def add_figure(
        self,
        tag: str,
        figure: Any,
        global_step: int | None = None,
        close: bool = True,
        walltime: float | None = None,
    ) -> None:
        """Log a matplotlib figure (or a list of same-sized figures, as a grid) as an image.

        The figure is rasterised here, in the caller: a Figure cannot cross to another
        process without pickling it, so Agg draws it into an RGBA array (the costly
        part, which matplotlib does in any writer) and the PNG encoding is the sidecar's.
        ``close`` closes the figures afterwards, as tensorboardX does.
        """
        figures = list(figure) if isinstance(figure, (list, tuple)) else [figure]
        if not figures or not all(hasattr(f, "canvas") and hasattr(f, "get_size_inches") for f in figures):
            raise TypeError(f"figure must be a matplotlib Figure or a list of them, got {type(figure).__name__}")
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        arrays = []
        for f in figures:
            canvas: Any = FigureCanvasAgg(f)  # matplotlib is untyped, and optional
            canvas.draw()
            arrays.append(np.asarray(canvas.buffer_rgba()).copy())
        if close:
            import matplotlib.pyplot as plt

            for f in figures:
                plt.close(f)
        if len(arrays) == 1:
            self.add_image(tag, arrays[0], global_step, "HWC", walltime)
        else:
            if len({a.shape for a in arrays}) != 1:
                raise ValueError("figures in one add_figure call must all have the same size in pixels")
            self.add_image(tag, np.stack(arrays), global_step, "NHWC", walltime)

    def add_video(
        self,
        tag: str,
        vid_tensor: Any,
        global_step: int | None = None,
        fps: float = 4,
        walltime: float | None = None,
    ) -> None:
        """Log a batch of videos as one animated GIF (tensorboardX's ``add_video``).

        Parameters
        ----------
        vid_tensor : NDArray or numpy array of shape (N, T, C, H, W)
            float in [0, 1] or uint8, C of 1, 3 or 4; frame ``t`` shows the N videos'
            frames ``t`` in a grid.
        fps : float > 0
            Frames per second.
        """
        tag, step, wall = self._common(tag, global_step, walltime)
        fps = v.check_fps(fps)
        part = self._image_part("vid_tensor", vid_tensor)
        if len(part.shape) != 5:
            raise ValueError(f"vid_tensor must be (N, T, C, H, W), got shape {part.shape}")
        v.check_dataformats("NCHW", (part.shape[0], *part.shape[2:]), "vid_tensor")
        v.check_video_size(part.shape)
        self._pipe.submit_array(Kind.VIDEO, tag, step, wall, [part], options={"fps": fps})

    def add_audio(
        self,
        tag: str,
        audio: Any,
        sample_rate: int = 44100,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log a clip for TensorBoard's Audio tab (16-bit PCM WAV, encoded in the sidecar).

        Parameters
        ----------
        audio : NDArray or numpy array
            Mono ``[frames]`` or stereo ``[frames, 2]`` / ``[2, frames]`` (dimensions of
            size 1 are squeezed); float in [-1, 1] or int16.
        sample_rate : int
            Samples per second, > 0.
        global_step, walltime
            As for :meth:`add_scalar`.
        """
        tag, step, wall = self._common(tag, global_step, walltime)
        sample_rate = v.check_sample_rate(sample_rate)

        def audio_dtype(dtype: str, name: str) -> None:
            if dtype not in ("float16", "float32", "float64", "int16"):
                raise TypeError(f"{name} must be float (values in [-1, 1]) or int16, got dtype {dtype}")

        part, arr = self._part("audio", audio, dtypes=audio_dtype)
        layout = v.audio_layout(part.shape)
        if arr is not None:
            v.check_unit_range(arr, "audio", -1.0, 1.0)
        options = {"sample_rate": int(sample_rate), "layout": layout}
        self._pipe.submit_array(Kind.AUDIO, tag, step, wall, [part], options=options)

    # -- embeddings and pr curves -------------------------------------------------
    def add_embedding(
        self,
        tag: str,
        embedding: Any,
        labels: Any = None,
        images: Any = None,
        global_step: int | None = None,
        metadata_header: list[str] | None = None,
        tensor_format: str = "tsv",
    ) -> None:
        """Log points for TensorBoard's Projector, with optional labels and thumbnails.

        The sidecar writes ``<logdir>/<step:05d>/<tag>/`` (tensors, ``metadata.tsv``,
        ``sprite.png``) and merges an entry into ``<logdir>/projector_config.pbtxt``,
        keeping other writers' entries, replacing this tag and step's.

        Parameters
        ----------
        tag : str
            Name of the embedding (a path component after escaping '/', so not '.' or '..').
        embedding : NDArray or numpy array of shape (N, D)
            One row per point.
        labels : list, numpy array or NDArray, optional
            N labels (one column), or N rows of equal length (several columns, named by
            ``metadata_header``).
        images : NDArray or numpy array of shape (N, C, H, W), optional
            Thumbnails (float in [0, 1] or uint8, C of 1, 3 or 4) for the sprite, at most
            8192 px a side in all.
        global_step : int or None
            The step in the directory name and the tensor name; None means 0.
        metadata_header : list of str, optional
            Column names when labels have several columns.
        tensor_format : 'tsv' or 'bytes'
            ``tensors.tsv``, or TensorBoard's raw float32 file (smaller, faster to load).
        """
        tag, step, wall = self._common(tag, global_step, None)
        if tag in (".", ".."):
            raise ValueError(f"tag of an embedding becomes a directory name; {tag!r} would escape the logdir")
        v.check_embedding_tag(tag)
        if tensor_format not in ("tsv", "bytes"):
            raise ValueError(f"tensor_format must be 'tsv' or 'bytes', got {tensor_format!r}")
        mat, mat_arr = self._part("mat", embedding)
        if len(mat.shape) != 2:
            raise ValueError(f"embedding must be a matrix (N, D), got shape {mat.shape}")
        if mat_arr is not None:
            v.check_embedding_matrix(mat_arr)
        n = mat.shape[0]
        parts = [mat]
        text = ""
        header = None
        if labels is not None:
            if isinstance(labels, (list, tuple)):
                rows, header = v.check_labels(labels, n, metadata_header)
                text = json.dumps(rows)
            else:
                if metadata_header is not None:
                    raise ValueError("metadata_header applies to labels given as rows (a list of lists)")
                lab, _ = self._part("labels", labels)
                if len(lab.shape) != 1 or lab.shape[0] != n:
                    raise ValueError(f"labels must hold {n} entries (one per embedding row), got shape {lab.shape}")
                parts.append(lab)
        elif metadata_header is not None:
            raise ValueError("metadata_header is given but labels are not")
        if images is not None:
            img = self._image_part("images", images)
            v.check_dataformats("NCHW", img.shape, "images")
            if img.shape[0] != n:
                raise ValueError(f"images must hold {n} thumbnails (one per embedding row), got {img.shape[0]}")
            v.check_sprite(img.shape)
            parts.append(img)
        options = {"metadata_header": header, "tensor_format": tensor_format}
        self._pipe.submit_array(Kind.EMBEDDING, tag, step, wall, parts, text=text, options=options, named=True)

    def add_pr_curve(
        self,
        tag: str,
        labels: Any,
        predictions: Any,
        num_thresholds: int = 201,
        global_step: int | None = None,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        """Log a precision-recall curve (TensorBoard's PR Curves tab).

        Parameters
        ----------
        labels : NDArray or numpy array
            Ground truth, 0/1 or bool, any shape.
        predictions : NDArray or numpy array
            Probabilities in [0, 1], as many as ``labels``.
        num_thresholds : int
            Thresholds evenly spaced in [0, 1], from 2 to 10000 (no 127 clamp).
        weights : NDArray or numpy array, optional
            Per-example weights, as many as ``labels``.
        global_step, walltime
            As for :meth:`add_scalar`.
        """
        tag, step, wall = self._common(tag, global_step, walltime)
        if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, (int, np.integer)):
            raise TypeError(f"num_thresholds must be an int, got {type(num_thresholds).__name__}")
        if not 2 <= num_thresholds <= 10_000:
            raise ValueError(f"num_thresholds must be from 2 to 10000, got {num_thresholds}")
        lab, lab_arr = self._part("labels", labels)
        pred, pred_arr = self._part("predictions", predictions)
        parts = [lab, pred]
        sizes = {"labels": int(np.prod(lab.shape)), "predictions": int(np.prod(pred.shape))}
        if weights is not None:
            w, w_arr = self._part("weights", weights)
            sizes["weights"] = int(np.prod(w.shape))
            parts.append(w)
            if w_arr is not None:
                v.check_pr_weights(w_arr)
        if len(set(sizes.values())) != 1:
            raise ValueError(f"labels, predictions and weights must have as many elements each, got {sizes}")
        if pred_arr is not None:
            v.check_unit_range(pred_arr.astype(np.float64, copy=False), "predictions", 0.0, 1.0)
        if lab_arr is not None and not np.isin(lab_arr, (0, 1)).all():
            raise ValueError("labels must be 0 or 1 (or bool)")
        options = {"num_thresholds": int(num_thresholds)}
        self._pipe.submit_array(Kind.PR_CURVE, tag, step, wall, parts, options=options)

    # -- graph, hparams, layouts -----------------------------------------------
    def add_graph(self, net: Any, input_shapes: dict[str, tuple[int, ...]] | None = None) -> None:
        """Log a network's structure for TensorBoard's Graphs tab.

        Parameters
        ----------
        net : mx.sym.Symbol or hybridized gluon.HybridBlock
            A HybridBlock must have been hybridized and run forward once (mxboard's
            rule), which is when MXNet has its symbol.
        input_shapes : dict of str to tuple, optional
            Shapes of the inputs (e.g. ``{'data': (1, 3, 224, 224)}``): every node's
            output shape is then inferred (symbolically, no computation) and shown.
        """
        sym = _symbol_of(net)
        options: dict[str, Any] = {}
        if input_shapes is not None:
            if not isinstance(input_shapes, dict):
                raise TypeError("input_shapes must be a dict of input name to shape tuple")
            internals = sym.get_internals()
            try:
                _, out_shapes, _ = internals.infer_shape_partial(**{k: tuple(s) for k, s in input_shapes.items()})
            except Exception as exc:
                raise ValueError(f"input_shapes do not fit the network: {exc}") from exc
            options["shapes"] = {
                name: list(shape) for name, shape in zip(internals.list_outputs(), out_shapes) if shape
            }
        self._pipe.submit(Kind.GRAPH, "graph", 0, _now(), text=sym.tojson(), options=options or None)

    def add_hparams(
        self,
        hparam_dict: dict[str, Any],
        metric_dict: dict[str, float],
        hparam_domain_discrete: dict[str, list[Any]] | None = None,
        global_step: int | None = None,
        status: str = "SUCCESS",
    ) -> None:
        """Log this run's hyperparameters and final metrics for TensorBoard's HParams tab.

        Written into this writer's own run (not a new sub-run per call, the
        tensorboardX/torch complaint), so the metrics are this run's scalars.

        Parameters
        ----------
        hparam_dict : dict of str to bool, int, float or str
        metric_dict : dict of str to number
            Each becomes a scalar with that tag at ``global_step`` and is listed as a
            metric of the experiment (a tag this run already logs gets one more point,
            so pass the final step, or name the metric apart, e.g. ``'final/accuracy'``).
        hparam_domain_discrete : dict of str to list, optional
            The values a hyperparameter can take (shown as a filter).
        status : 'SUCCESS', 'FAILURE' or 'RUNNING'
        """
        hparams = v.check_hparams(hparam_dict)
        if not isinstance(metric_dict, dict):
            raise TypeError("metric_dict must be a dict of str to number")
        metrics = {
            v.check_tag(k, "metric_dict key"): v.check_number(x, f"metric_dict[{k!r}]") for k, x in metric_dict.items()
        }
        domains: dict[str, list[Any]] = {}
        if hparam_domain_discrete is not None and not isinstance(hparam_domain_discrete, dict):
            raise TypeError("hparam_domain_discrete must be a dict of hparam name to a list of values")
        for k, values in (hparam_domain_discrete or {}).items():
            if k not in hparams:
                raise ValueError(f"hparam_domain_discrete names {k!r}, which is not in hparam_dict")
            if not isinstance(values, (list, tuple)) or not values:
                raise TypeError(f"hparam_domain_discrete[{k!r}] must be a non-empty list")
            domains[k] = [v.check_hparams({k: x}, "hparam_domain_discrete")[k] for x in values]
            kinds = {_hparam_kind(x) for x in [*domains[k], hparams[k]]}
            if len(kinds) != 1:
                raise TypeError(f"hparam_domain_discrete[{k!r}] must hold values of the type of hparam_dict[{k!r}]")
        if status not in ("SUCCESS", "FAILURE", "RUNNING"):
            raise ValueError(f"status must be 'SUCCESS', 'FAILURE' or 'RUNNING', got {status!r}")
        step = v.check_step(global_step)
        now = _now()
        options = {
            "hparams": hparams,
            "metrics": metrics,
            "domains": domains,
            "start_time": self._start_time,
            "end_time": now,
            "status": status,
        }
        self._pipe.submit(Kind.HPARAMS, "_hparams_", step, now, options=options)

    def add_custom_scalars(self, layout: dict[str, dict[str, list[Any]]]) -> None:
        """Arrange scalar charts in TensorBoard's Custom Scalars tab.

        ``layout``: ``{category: {chart: ['Multiline', [tag regexes]] or
        ['Margin', [value_tag, lower_tag, upper_tag]]}}`` (tensorboardX's format).
        """
        self._pipe.submit(
            Kind.CUSTOM_SCALARS, "custom_scalars__config__", 0, _now(), options={"layout": v.check_layout(layout)}
        )

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
        ``rss_bytes``, ``scheduling`` (its policy, niceness and CPUs); None once it is gone).
        """
        return self._pipe.stats()

    def reopen(self) -> None:
        """After :meth:`close`, start a new sidecar writing a new event file (mxboard's API)."""
        if not self._pipe.closed:
            return
        self._remember_files()
        self._pipe = Pipeline(self._logdir, **self._config)

    # -- mxboard's scalar export ---------------------------------------------------
    def _remember_files(self) -> None:
        sidecar = None if self._pipe.closed else self._pipe.stats().get("sidecar")
        if sidecar:
            self._files_seen.update(sidecar["files"])

    def export_scalars(self, path: str) -> None:
        """Write every scalar this writer logged (since :meth:`clear_scalar_dict`) as
        JSON ``{run_dir/tag or group run dir: [[wall_time, step, value], ...]}``, mxboard's
        format.  mxboard kept every scalar in RAM for this ("it explodes your RAM");
        here they are read back from the event files at the time of the call.
        """
        if not self._pipe.closed:
            self.flush()
        self._remember_files()
        out = self._read_scalars(advance=False)
        with open(path, "w") as f:
            json.dump(out, f)

    def clear_scalar_dict(self) -> None:
        """Forget the scalars logged so far, for :meth:`export_scalars` (mxboard's API)."""
        if not self._pipe.closed:
            self.flush()
        self._remember_files()
        self._read_scalars(advance=True)

    def _read_scalars(self, advance: bool) -> dict[str, list[list[float]]]:
        from ..formats.proto import event_pb2
        from ..formats.records import iter_records

        out: dict[str, list[list[float]]] = {}
        for path in sorted(self._files_seen):
            start = self._exported_from.get(path, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            run = os.path.relpath(os.path.dirname(path), self._logdir)
            consumed = 0
            for rec in iter_records(data, strict=False):
                consumed = rec.offset + len(rec.data) + 16
                ev = event_pb2.Event.FromString(rec.data)
                for value in ev.summary.value:
                    if value.tensor.dtype == 1 and len(value.tensor.float_val) == 1:  # DT_FLOAT scalar
                        key = os.path.join(self._logdir, run if run != "." else value.tag)
                        out.setdefault(key, []).append([ev.wall_time, ev.step, value.tensor.float_val[0]])
            if advance:
                self._exported_from[path] = start + consumed
        return out

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


def _hparam_kind(x: Any) -> str:
    return "bool" if isinstance(x, bool) else "str" if isinstance(x, str) else "number"


def _symbol_of(net: Any) -> Any:
    """The MXNet Symbol of ``net`` (a Symbol, or a hybridized HybridBlock after a forward)."""
    mx = sys.modules.get("mxnet")
    if mx is not None and isinstance(net, mx.sym.Symbol):
        return net
    cached = getattr(net, "_cached_graph", None)
    if mx is not None and isinstance(net, mx.gluon.HybridBlock):
        if not cached:
            raise ValueError("add_graph needs a HybridBlock that was hybridized and run forward once "
                             "(net.hybridize(); net(x)), which is when MXNet builds its symbol")  # fmt: skip
        return cached[1]
    raise TypeError(f"net must be an mx.sym.Symbol or a gluon.HybridBlock, got {type(net).__name__}")


SummaryWriter = SidecarWriter
