"""Argument checks made in the caller's thread, before anything is enqueued.

Every check names the argument and what it accepts.  They cover what can be known
without reading an NDArray's data (invariant 5); for numpy arrays, already in host
memory, the kinds' own modules check values too.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from typing import Any, cast

import numpy as np

__all__ = [
    "INT64_MAX",
    "MAX_TAG_BYTES",
    "check_cpus",
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
# dtypes an array may travel as (messages.DTYPE_CODES); others are refused here.
ARRAY_DTYPES = frozenset(
    ["float16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "bool", "uint16", "uint32", "uint64"]
)
INT64_MAX = (1 << 63) - 1


def short_repr(value: Any) -> str:
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
        raise ValueError(f"{name} must be finite and >= 0, got {short_repr(walltime)}") from None
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
    # '~/logs' from a config file or argparse default has met no shell: expand it as
    # one would, rather than create a directory named '~' under the working directory.
    path = os.path.expanduser(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"logdir must be a directory, but {path!r} is a file")
    return os.path.abspath(path)


def check_cpus(cpu_affinity: Any) -> tuple[int, ...]:
    """``cpu_affinity`` as CPU ids this process may run on; () for None (no pinning)."""
    if cpu_affinity is None:
        return ()
    if isinstance(cpu_affinity, (str, bytes)) or not isinstance(cpu_affinity, Iterable):
        raise TypeError(f"cpu_affinity must be a sequence of CPU ids (ints >= 0) or None, got {cpu_affinity!r}")
    cpus = tuple(cpu_affinity)  # once: a generator would be empty after the check
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus):
        raise TypeError(f"cpu_affinity must be a sequence of CPU ids (ints >= 0) or None, got {cpu_affinity!r}")
    if not cpus:
        # An empty set of CPUs is not "anywhere": the kernel refuses it.  Say so here
        # rather than let it mean no pinning, or kill the sidecar at start-up.
        raise ValueError("cpu_affinity=[] pins the sidecar to no CPU; pass None for no pinning")
    if hasattr(os, "sched_getaffinity"):
        allowed = os.sched_getaffinity(0)
        outside = sorted(set(cpus) - allowed)
        if outside:
            raise ValueError(f"cpu_affinity names CPUs {outside} this process may not run on; "
                             f"it may run on {sorted(allowed)}")  # fmt: skip
    return cpus


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
        raise ValueError(f"{name} must be a finite number > 0, got {short_repr(value)}") from None
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


# -- images, audio, video -------------------------------------------------------


def check_unit_range(arr: np.ndarray[Any, Any], name: str, lo: float, hi: float) -> None:
    """Values of a float numpy array within [lo, hi] (NaN fails): checked here, in the
    caller, because host memory can be read without a sync (invariant 5)."""
    if arr.dtype.kind == "f" and arr.size:
        a_min, a_max = float(np.min(arr)), float(np.max(arr))
        if not (lo <= a_min and a_max <= hi):  # NaN compares False
            raise ValueError(f"{name} of dtype {arr.dtype} must hold values in [{lo:g}, {hi:g}], "
                             f"got min {a_min:g}, max {a_max:g}")  # fmt: skip


# -- scalars groups, hparams, custom scalars -----------------------------------------


# -- embeddings ---------------------------------------------------------------------


# -- image-like arrays: images, video frames, sprite thumbnails ---------------------------

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


def check_image_dtype(dtype: str, name: str) -> None:
    if dtype not in IMAGE_DTYPES:
        raise TypeError(f"{name} must be float (values in [0, 1]) or uint8, got dtype {dtype}")
