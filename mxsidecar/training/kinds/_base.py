"""What every kind's calls share: the writer's state they use, and the checks of one
array argument (an NDArray described from its metadata, or a numpy array)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .. import arguments as v
from ..capture import copy_numpy, is_ndarray, ndarray_info
from ..pipeline import Part, Pipeline

__all__ = ["KindCalls"]

_now = time.time


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
