"""Argument checks made in the caller's thread, before anything is enqueued.

Every check names the argument and what it accepts.  They cover what can be known
without reading an NDArray's data (invariant 5); for numpy arrays, already in host
memory, the kinds' own modules check values too.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from typing import Any, cast

import numpy as np

__all__ = [
    "INT64_MAX",
    "MAX_TAG_BYTES",
    "check_logdir",
    "check_number",
    "check_positive",
    "check_run_name",
    "check_step",
    "check_tag",
    "check_text",
    "check_walltime",
]

MAX_TAG_BYTES = 4096
# A run name becomes directories under the logdir: each part one path component (255
# bytes on every file system we run on), and ``main_tag/key`` plus the logdir and the
# event file's name must stay under PATH_MAX (4096), so a whole name gets a quarter.
MAX_NAME_PART_BYTES = 255
MAX_RUN_NAME_BYTES = 1024
MAX_BINS = 10_000  # tensorboardX#1: bins='auto' once asked numpy for 66 billion
BIN_RULES = ("auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt")
# dtypes an array may travel as (messages.DTYPE_CODES); others are refused here.
ARRAY_DTYPES = frozenset(
    ["float16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "bool", "uint16", "uint32", "uint64"]
)
INT64_MAX = (1 << 63) - 1


def _short(value: Any) -> str:
    """``repr(value)``, cut: a 10**400 in a message should not be 400 digits."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_tag(tag: Any, name: str = "tag") -> str:
    """A tag TensorBoard can show: a non-empty str without control characters."""
    if not isinstance(tag, str):
        raise TypeError(f"{name} must be a str, got {type(tag).__name__}")
    if not tag.strip():
        raise ValueError(f"{name} must be a non-empty, non-blank str, got {tag!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in tag):
        raise ValueError(f"{name} must not contain control characters (newline, tab, NUL...), got {tag!r}")
    try:
        n = len(tag.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} must be valid Unicode text, got {tag!r}") from exc
    if n > MAX_TAG_BYTES:
        raise ValueError(f"{name} must be at most {MAX_TAG_BYTES} bytes of UTF-8, got {n}")
    return tag


def check_run_name(name_value: Any, name: str) -> str:
    """A tag that also becomes a directory under the logdir: it must stay inside it."""
    check_tag(name_value, name)
    if name_value.startswith("/") or "\\" in name_value or ":" in name_value:
        raise ValueError(f"{name} becomes a directory under logdir; it must be a relative path with '/' "
                         f"separators only (no leading '/', '\\' or ':'), got {name_value!r}")  # fmt: skip
    for part in name_value.split("/"):
        if part in ("", ".", "..") or part != part.strip():
            raise ValueError(
                f"{name} becomes a directory under logdir; each '/'-separated part must be a non-empty name "
                f"other than '.' or '..', without surrounding spaces, got {name_value!r}"
            )
        if len(part.encode("utf-8")) > MAX_NAME_PART_BYTES:
            raise ValueError(f"{name} becomes a directory under logdir; each '/'-separated part must be at most "
                             f"{MAX_NAME_PART_BYTES} bytes of UTF-8 (a file name), got {part[:40]!r}...")  # fmt: skip
    n = len(name_value.encode("utf-8"))
    if n > MAX_RUN_NAME_BYTES:
        raise ValueError(f"{name} becomes a directory under logdir; it must be at most {MAX_RUN_NAME_BYTES} "
                         f"bytes of UTF-8, got {n}")  # fmt: skip
    return str(name_value)


def check_run_path(logdir: str, run: str, name: str) -> None:
    """A run directory the sidecar can make: no file already where a directory must go."""
    path = logdir
    for part in run.split("/"):
        path = os.path.join(path, part)
        if os.path.lexists(path) and not os.path.isdir(path):
            raise ValueError(f"{name} {run!r} needs the directory {path!r}, but a file of that name exists")


def check_step(step: Any, name: str = "global_step") -> int:
    if step is None:
        return 0
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 0 or None, got {type(step).__name__} {step!r}")
    value = int(step)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if value > INT64_MAX:
        raise ValueError(f"{name} must fit in int64, got {value}")
    return value


def check_walltime(walltime: Any, name: str = "walltime") -> float:
    if isinstance(walltime, bool) or not isinstance(walltime, numbers.Real):
        raise TypeError(f"{name} must be seconds since the epoch as a float, or None, got {type(walltime).__name__}")
    try:
        value = float(walltime)
    except OverflowError:
        raise ValueError(f"{name} must be finite and >= 0, got {_short(walltime)}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {walltime!r}")
    return value


def check_number(value: Any, name: str = "value") -> float:
    """A real number: int, float, numpy scalar, or a one-element numpy array."""
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ValueError(f"{name} must be a scalar or hold exactly one element, got shape {value.shape}")
        value = value.reshape(-1)[0]
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError as exc:
            raise ValueError(f"{name} is too large for a float: {value!r}") from exc
    raise TypeError(f"{name} must be a real number (int, float, numpy scalar), got {type(value).__name__}")


def check_text(text: Any, name: str = "text") -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} must be valid Unicode text: {exc}") from exc
    return text


def check_logdir(logdir: Any) -> str:
    if not isinstance(logdir, (str, os.PathLike)):
        raise TypeError(f"logdir must be a str or os.PathLike, got {type(logdir).__name__}")
    path = os.fspath(logdir)
    if isinstance(path, bytes):
        raise TypeError("logdir must be a str path, not bytes")
    if not path:
        raise ValueError("logdir must be a non-empty path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"logdir must be a directory, but {path!r} is a file")
    return os.path.abspath(path)


def check_positive(value: Any, name: str, *, integer: bool = False, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    kinds: tuple[type, ...] = (int, np.integer) if integer else (numbers.Real,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        what = "an int" if integer else "a number"
        raise TypeError(f"{name} must be {what} > 0{' or None' if allow_none else ''}, got {type(value).__name__}")
    value = cast(Any, value)  # narrowed to object by the isinstance over a runtime tuple
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number > 0, got {_short(value)}") from None
    if not number > 0 or not math.isfinite(number):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return int(value) if integer else number


def check_array(value: Any, name: str, *, min_size: int = 1) -> np.ndarray[Any, Any]:
    """A real-valued numpy array (lists and tuples of numbers are converted)."""
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (list, tuple)) or (np.isscalar(value) and isinstance(value, numbers.Real)):
        try:
            arr = np.asarray(value)
        except ValueError as exc:
            raise ValueError(f"{name} must be a rectangular array of numbers: {exc}") from exc
    else:
        raise TypeError(f"{name} must be an MXNet NDArray, a numpy array or a sequence of numbers, "
                        f"got {type(value).__name__}")  # fmt: skip
    if arr.dtype.name not in ARRAY_DTYPES:
        raise TypeError(f"{name} must hold real numbers (float, int, uint or bool), got dtype {arr.dtype}")
    if not arr.dtype.isnative:
        # The sidecar reads the span in native order by dtype name: a '>f4' array copied
        # byte for byte would arrive as other numbers.  Swapped here, once (a rare case).
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.size < min_size:
        raise ValueError(f"{name} must have at least {min_size} element(s), got shape {arr.shape}")
    return arr


def check_bins(bins: Any, name: str = "bins") -> Any:
    """'default', a numpy rule name, an int in [1, MAX_BINS], or increasing finite edges."""
    if isinstance(bins, str):
        if bins == "default" or bins in BIN_RULES:
            return bins
        raise ValueError(f"{name} must be 'default', an int, a sequence of edges or one of {BIN_RULES}, got {bins!r}")
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        if not 1 <= bins <= MAX_BINS:
            raise ValueError(f"{name} must be from 1 to {MAX_BINS}, got {bins}")
        return int(bins)
    if isinstance(bins, (list, tuple, np.ndarray)):
        try:
            edges = np.asarray(bins, dtype=np.float64) if len(bins) else np.zeros(0)
        except OverflowError:
            raise ValueError(f"{name} as edges must be finite numbers, got {_short(bins)}") from None
        if edges.ndim != 1 or not 2 <= edges.size <= MAX_BINS + 1:
            raise ValueError(f"{name} as edges must be a flat sequence of 2 to {MAX_BINS + 1} numbers, got {bins!r}")
        if not np.all(np.isfinite(edges)) or not np.all(np.diff(edges) > 0):
            raise ValueError(f"{name} as edges must be finite and strictly increasing, got {bins!r}")
        return [float(e) for e in edges]
    raise TypeError(f"{name} must be 'default', an int, a sequence of edges or a rule name, got {type(bins).__name__}")


def check_histogram_values(arr: np.ndarray[Any, Any], name: str = "values") -> None:
    """At least one finite value in a numpy array: NaN and Inf are left out of the
    buckets, so an array of nothing else leaves nothing to draw (the sidecar refuses it)."""
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).any():
        raise ValueError(f"{name} must hold at least one finite value, got only NaN/Inf (shape {arr.shape})")


# -- images, audio, video -------------------------------------------------------

DATAFORMATS = ("CHW", "HWC", "HW", "NCHW", "NHWC")
_BY_RANK = {2: "HW", 3: "CHW", 4: "NCHW"}  # mxboard's convention when no format is given
IMAGE_DTYPES = frozenset(["float16", "float32", "float64", "uint8"])


def check_dataformats(dataformats: Any, shape: tuple[int, ...], name: str = "image") -> str:
    """The layout of an image array; None picks mxboard's by rank (HW, CHW, NCHW)."""
    if dataformats is None:
        if len(shape) not in _BY_RANK:
            raise ValueError(f"{name} must have rank 2 (HW), 3 (CHW) or 4 (NCHW), got shape {shape}")
        dataformats = _BY_RANK[len(shape)]
    if dataformats not in DATAFORMATS:
        raise ValueError(f"dataformats must be one of {DATAFORMATS}, got {dataformats!r}")
    if len(shape) != len(dataformats):
        raise ValueError(
            f"{name} of shape {shape} does not match dataformats={dataformats!r} (rank {len(dataformats)})"
        )
    dims = dict(zip(dataformats, shape))  # same length, checked above
    if dims.get("C", 1) not in (1, 3, 4):
        raise ValueError(f"{name} must have 1, 3 or 4 channels (C of {dataformats!r}), got {dims['C']}")
    if any(d < 1 for d in shape):
        raise ValueError(f"{name} must not be empty, got shape {shape}")
    return str(dataformats)


def check_unit_range(arr: np.ndarray[Any, Any], name: str, lo: float, hi: float) -> None:
    """Values of a float numpy array within [lo, hi] (NaN fails): checked here, in the
    caller, because host memory can be read without a sync (invariant 5)."""
    if arr.dtype.kind == "f" and arr.size:
        a_min, a_max = float(np.min(arr)), float(np.max(arr))
        if not (lo <= a_min and a_max <= hi):  # NaN compares False
            raise ValueError(f"{name} of dtype {arr.dtype} must hold values in [{lo:g}, {hi:g}], "
                             f"got min {a_min:g}, max {a_max:g}")  # fmt: skip


def check_image_dtype(dtype: str, name: str) -> None:
    if dtype not in IMAGE_DTYPES:
        raise TypeError(f"{name} must be float (values in [0, 1]) or uint8, got dtype {dtype}")


def audio_layout(shape: tuple[int, ...], name: str = "audio") -> str:
    """'frames' ([frames] or [frames, channels]) or 'channels_first' ([channels, frames])."""
    dims = [d for d in shape if d != 1] or [1]
    if len(dims) == 1:
        return "frames"
    if len(dims) == 2:
        squeezed = tuple(dims)
        if squeezed[1] == 2:
            return "frames"
        if squeezed[0] == 2:
            return "channels_first"
    raise ValueError(f"{name} must be mono [frames] or stereo [frames, 2] / [2, frames] (after squeezing "
                     f"dimensions of size 1), got shape {shape}")  # fmt: skip


# The WAV header holds the byte rate, sample_rate * channels * 2 bytes, in a u32.
MAX_SAMPLE_RATE = (2**32 - 1) // 4


def check_sample_rate(sample_rate: Any, name: str = "sample_rate") -> int:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
        raise TypeError(f"{name} must be an int from 1 to {MAX_SAMPLE_RATE}, got {type(sample_rate).__name__}")
    if not 1 <= sample_rate <= MAX_SAMPLE_RATE:
        raise ValueError(f"{name} must be from 1 to {MAX_SAMPLE_RATE} (a WAV header holds rate * 4 bytes "
                         f"of stereo 16-bit samples in a u32), got {_short(sample_rate)}")  # fmt: skip
    return int(sample_rate)


MIN_FPS = 1e-6  # GIF delays stop at 655.35 s a frame (any fps below 1/655.35 plays the same)


def check_fps(fps: Any, name: str = "fps") -> float:
    """A positive frame rate; tiny ones would overflow the GIF delay's arithmetic."""
    rate = float(check_positive(fps, name))
    if rate < MIN_FPS:
        raise ValueError(f"{name} must be at least {MIN_FPS:g} (a GIF frame lasts at most 655.35 s), got {fps!r}")
    return rate


MAX_GIF_PX = 65535  # a GIF's logical screen is u16 x u16


def check_video_size(shape: tuple[int, ...], name: str = "vid_tensor") -> None:
    """(N, T, C, H, W): the grid of N frames (2 px gaps, ceil(sqrt(N)) columns) fits a GIF."""
    n, _, _, h, w = shape
    ncols = math.ceil(math.sqrt(n))
    nrows = math.ceil(n / ncols)
    height, width = (h, w) if n == 1 else (nrows * (h + 2) + 2, ncols * (w + 2) + 2)
    if height > MAX_GIF_PX or width > MAX_GIF_PX:
        raise ValueError(f"{name} of shape {shape} makes GIF frames of {width}x{height} px; "
                         f"a GIF is at most {MAX_GIF_PX} px a side")  # fmt: skip


# -- scalars groups, hparams, custom scalars -----------------------------------------

HPARAM_TYPES = (bool, int, float, str)


def check_hparams(hparams: Any, name: str = "hparam_dict") -> dict[str, Any]:
    if not isinstance(hparams, dict) or not hparams:
        raise TypeError(f"{name} must be a non-empty dict of str to bool, int, float or str")
    out: dict[str, Any] = {}
    for k, value in hparams.items():
        check_tag(k, f"{name} key")
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, HPARAM_TYPES):
            raise TypeError(f"{name}[{k!r}] must be bool, int, float or str, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}[{k!r}] must be finite, got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                float(value)  # TensorBoard holds every number as a double
            except OverflowError:
                raise ValueError(f"{name}[{k!r}] must be within the range of a float64, got {_short(value)}") from None
        if isinstance(value, str):
            check_text(value, f"{name}[{k!r}]")
        out[k] = value
    return out


def check_layout(layout: Any) -> dict[str, dict[str, list[Any]]]:
    """tensorboardX's custom-scalars layout:
    ``{category: {chart: ['Multiline', [tag regexes]] or ['Margin', [value, lower, upper]]}}``."""
    if not isinstance(layout, dict) or not layout:
        raise TypeError("layout must be a non-empty dict of category title to {chart title: [kind, tags]}")
    out: dict[str, dict[str, list[Any]]] = {}
    for category, charts in layout.items():
        check_tag(category, "layout category")
        if not isinstance(charts, dict) or not charts:
            raise TypeError(f"layout[{category!r}] must be a non-empty dict of chart title to [kind, tags]")
        out[category] = {}
        for chart, spec in charts.items():
            check_tag(chart, "layout chart title")
            where = f"layout[{category!r}][{chart!r}]"
            if not isinstance(spec, (list, tuple)) or len(spec) != 2 or spec[0] not in ("Multiline", "Margin"):
                raise ValueError(f"{where} must be ['Multiline', [tags...]] or ['Margin', [value, lower, upper]]")
            kind, tags = spec
            if not isinstance(tags, (list, tuple)) or not tags or not all(isinstance(t, str) and t for t in tags):
                raise ValueError(f"{where} tags must be a non-empty list of non-empty str")
            for t in tags:
                check_text(t, f"{where} tag")
            if kind == "Margin" and len(tags) != 3:
                raise ValueError(f"{where}: a Margin chart takes exactly [value, lower, upper] tags, got {len(tags)}")
            if kind == "Multiline":
                for t in tags:
                    try:
                        re.compile(t)
                    except re.error as exc:
                        raise ValueError(f"{where}: {t!r} is not a valid regular expression: {exc}") from exc
            out[category][chart] = [kind, list(tags)]
    return out


# -- embeddings ---------------------------------------------------------------------

MAX_SPRITE_PX = 8192  # TensorBoard's projector refuses larger sprites (MAX_SPRITE_IMAGE_SIZE_PX)
# What the projector's metadata.tsv turns into a space (projector._ROW_BREAKERS): a tab
# or a line break in a column name would split the header row.
_ROW_BREAKERS = {ord(c): " " for c in "\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def check_labels(labels: list[Any] | tuple[Any, ...], n: int, header: Any) -> tuple[list[Any], list[str] | None]:
    """Embedding labels as rows for metadata.tsv: N scalars (one column) or N equal rows."""
    if len(labels) != n:
        raise ValueError(f"labels must hold {n} entries (one per embedding row), got {len(labels)}")
    if all(type(x) is str for x in labels):  # the common case, without a per-label call
        if header is not None:
            raise ValueError("metadata_header applies to multi-column labels (rows); one column has no header")
        return list(labels), None
    multi = n > 0 and all(isinstance(row, (list, tuple)) for row in labels)
    if multi:
        width = len(labels[0])
        if width < 2 or any(len(row) != width for row in labels):
            raise ValueError("labels as rows must all have the same number (>= 2) of columns")
        if header is None:
            header = [f"label_{i}" for i in range(width)]
        rows: list[Any] = [[_label_str(x) for x in row] for row in labels]
    else:
        if any(isinstance(row, (list, tuple)) for row in labels):
            raise ValueError("labels must be all scalars (one column) or all rows (several columns)")
        if header is not None:
            raise ValueError("metadata_header applies to multi-column labels (rows); one column has no header")
        rows = [_label_str(x) for x in labels]
    if header is not None:
        if not isinstance(header, (list, tuple)) or not all(isinstance(h, str) for h in header):
            raise TypeError("metadata_header must be a list of str")
        if len(header) != len(rows[0]):
            raise ValueError(f"metadata_header has {len(header)} names for {len(rows[0])} label columns")
        # As metadata.tsv will show them: breakers become spaces, and TensorBoard's
        # String.trim() also drops U+FEFF.
        shown = [h.translate(_ROW_BREAKERS) for h in header]
        if any(not h.replace("\ufeff", "").strip() for h in shown) or len(set(shown)) != len(shown):
            raise ValueError("metadata_header names must be non-blank and distinct (tabs and line breaks "
                             f"count as spaces), got {header!r}")  # fmt: skip
        header = list(header)
    return rows, header


def _label_str(x: Any) -> str:
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, bytes):
        x = x.decode("utf-8", "replace")
    return str(x)


def check_embedding_tag(tag: str, name: str = "tag") -> str:
    """The tag becomes one directory name once '%', '/' and '\\' are escaped (projector.tag_dir_name)."""
    escaped = tag.replace("%", "%25").replace("/", "%2F").replace("\\", "%5C")
    n = len(escaped.encode("utf-8"))
    if n > MAX_NAME_PART_BYTES:
        raise ValueError(f"{name} of an embedding becomes a directory name: at most {MAX_NAME_PART_BYTES} bytes "
                         f"of UTF-8 once '%', '/' and '\\' are escaped as %XX, got {n}")  # fmt: skip
    return tag


def check_embedding_matrix(arr: np.ndarray[Any, Any], name: str = "embedding") -> None:
    """Finite as float32 (what TensorBoard reads): the projector cannot place NaN/Inf points."""
    if arr.dtype.kind == "f":
        with np.errstate(over="ignore"):
            finite = np.isfinite(arr.astype(np.float32, copy=False))
        if not finite.all():
            raise ValueError(f"{name} must hold finite values within float32's range, "
                             f"got {int(finite.size - np.count_nonzero(finite))} NaN/Inf or larger")  # fmt: skip


def check_pr_weights(arr: np.ndarray[Any, Any], name: str = "weights") -> None:
    """Finite and >= 0: one NaN weight makes every count NaN, a negative one a negative count."""
    if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr >= 0)):
        raise ValueError(f"{name} must be finite and >= 0")


def check_sprite(shape: tuple[int, ...]) -> None:
    n, _, h, w = shape
    side = math.ceil(math.sqrt(n))
    if side * max(h, w) > MAX_SPRITE_PX:
        raise ValueError(f"images make a sprite of {side}x{side} thumbnails of {h}x{w} px: "
                         f"{side * max(h, w)} px a side, over TensorBoard's limit of {MAX_SPRITE_PX}")  # fmt: skip
