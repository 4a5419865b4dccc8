"""Videos (``add_video``): (N, T, C, H, W) batches, as animated GIFs.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/video.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

import math
from typing import Any

from ...wire.descriptors import Kind
from .. import arguments as v
from ._base import KindCalls

__all__ = ["VideoCalls"]

MIN_FPS = 1e-6  # GIF delays stop at 655.35 s a frame (any fps below 1/655.35 plays the same)


def check_fps(fps: Any, name: str = "fps") -> float:
    """A positive frame rate; tiny ones would overflow the GIF delay's arithmetic."""
    rate = float(v.check_positive(fps, name))
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


class VideoCalls(KindCalls):
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
        fps = check_fps(fps)
        part = self._image_part("vid_tensor", vid_tensor)
        if len(part.shape) != 5:
            raise ValueError(f"vid_tensor must be (N, T, C, H, W), got shape {part.shape}")
        v.check_dataformats("NCHW", (part.shape[0], *part.shape[2:]), "vid_tensor")
        check_video_size(part.shape)
        self._pipe.submit_array(Kind.VIDEO, tag, step, wall, [part], options={"fps": fps})
