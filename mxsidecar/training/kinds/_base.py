"""What every kind's calls share: the writer's state they use, and the checks of one
array argument (an NDArray described from its metadata, or a numpy array)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import numpy as np

from .. import arguments as v
from ..admission import Part
from ..capture import NDArrayInfo, copy_numpy, is_ndarray
from ..pipeline import Pipeline

__all__ = ["KindCalls"]

_now = time.time


def _fill_numpy(arr: np.ndarray[Any, Any], buf: Any, offset: int) -> None:
    copy_numpy(buf, offset, arr)


class KindCalls:
    """The state the ``add_*`` mixins share with :class:`~mxsidecar.SidecarWriter`."""

    _logdir: str
    _pipe: Pipeline
    _tags: set[str]
    _runs: set[str]
    _start_time: float

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
            engine = self._pipe.engine
            info = engine.describe(value)
            arr = None
            shape, dtype, nbytes, size, _ = info
            fill: Any = partial(engine.start, value, info)
        else:
            arr = v.check_array(value, name, min_size=0)
            shape, dtype, nbytes, size = arr.shape, arr.dtype.name, arr.nbytes, arr.size
            fill = partial(_fill_numpy, arr)
        if size < min_size:
            raise ValueError(f"{name} must have at least {min_size} element(s), got shape {shape}")
        if max_size is not None and size > max_size:
            raise ValueError(f"{name} must hold exactly one element, got an array of shape {shape}")
        if dtypes is not None:
            dtypes(dtype, name)
        return Part(name, shape, dtype, nbytes, fill), arr

    def _ndarray(self, name: str, value: Any, max_size: int | None = None) -> NDArrayInfo:
        """An NDArray argument of the per-step kinds (scalars, histograms), described
        from its metadata (no sync) for :meth:`Pipeline.submit_ndarray`: the short
        path of :meth:`_part`, with the same checks."""
        pipe = self._pipe
        info = (pipe._engine or pipe.engine).describe(value)
        size = info[3]
        if size < 1:
            raise ValueError(f"{name} must have at least 1 element(s), got shape {info[0]}")
        if max_size is not None and size > max_size:
            raise ValueError(f"{name} must hold exactly one element, got an array of shape {info[0]}")
        return info

    def _common(self, tag: Any, global_step: Any, walltime: Any) -> tuple[str, int, float]:
        return self._tag(tag), v.check_step(global_step), _now() if walltime is None else v.check_walltime(walltime)
