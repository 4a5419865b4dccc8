"""Videos (``add_video``): (N, T, C, H, W) batches, as animated GIFs.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/video.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ...wire.descriptors import Kind
from .. import arguments as v
from ._base import KindCalls

__all__ = ["VideoCalls"]


def check_fps(fps: Any, name: str = "fps") -> float:
    """A frame rate a GIF can hold: a slower one would need a frame longer than 655.35 s."""
    from ...formats.gif import MIN_FPS  # the GIF schedule both halves follow (standard library only)

    rate = float(v.check_positive(fps, name))
    if rate < MIN_FPS:
        raise ValueError(f"{name} must be at least {MIN_FPS:.6g} (a GIF frame lasts at most 655.35 s), got {fps!r}")
    return rate


def check_still_runs(arr: np.ndarray[Any, Any], fps: float, name: str = "vid_tensor") -> None:
    """Identical consecutive frames become one GIF frame of their summed delay, at most
    655.35 s; the sidecar refuses a longer run, so for host data say so here."""
    from ...formats import gif

    n_frames = arr.shape[1]
    delays = gif.frame_delays_cs(fps, n_frames)
    if sum(delays) <= gif.MAX_FRAME_CS:
        return  # the common case: even one run of every frame fits, no need to compare
    # Compare the pixels the sidecar will draw: alpha dropped, floats as rint(x * 255)
    # in the dtype image.scale_float uses.
    pix = arr[:, :, :3] if arr.shape[2] == 4 else arr
    if pix.dtype.kind == "f":
        work = np.float32 if pix.dtype == np.float16 else pix.dtype
        pix = np.rint(np.multiply(pix, 255.0, dtype=work))
    run = gif.overlong_still(delays, lambda t, s: np.array_equal(pix[:, t], pix[:, s]))
    if run is not None:
        first, last, held = run
        raise ValueError(f"{name} frames {first}..{last} are identical and at fps={fps:g} would show for "
                         f"{held / 100:g} s as one GIF frame, which lasts at most 655.35 s")  # fmt: skip


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
        fps : float, at least 100/65535
            Frames per second.  GIF delays are whole centiseconds: each frame ends at
            the centisecond nearest its time, so the clip keeps ``fps`` on average.
            Above 50 it plays at 50 (browsers slow shorter delays to 10 cs), with a
            warning.  A run of identical frames lasts at most 655.35 s.

        A fourth channel (alpha) is dropped, with a warning: GIF transparency is on or
        off per pixel.
        """
        tag, step, wall = self._common(tag, global_step, walltime)
        rate = check_fps(fps)
        part, arr = self._part("vid_tensor", vid_tensor, dtypes=v.check_image_dtype)
        if len(part.shape) != 5:
            raise ValueError(f"vid_tensor must be (N, T, C, H, W), got shape {part.shape}")
        v.check_dataformats("NCHW", (part.shape[0], *part.shape[2:]), "vid_tensor")
        check_video_size(part.shape)
        if arr is not None:
            v.check_unit_range(arr, "vid_tensor", 0.0, 1.0)
            check_still_runs(arr, rate)
        # What the GIF format forces, said here (the caller's thread, before the item
        # is queued) rather than found out in the browser.
        from ...formats.gif import MAX_FPS

        if rate > MAX_FPS:
            warnings.warn(f"add_video({tag!r}): fps={fps!r} is above {MAX_FPS:g}; GIF delays are whole "
                          "centiseconds and browsers slow delays under 2 cs to 10 cs, so it will play at "
                          f"{MAX_FPS:g} fps", UserWarning, stacklevel=2)  # fmt: skip
        if part.shape[2] == 4:
            warnings.warn(f"add_video({tag!r}): the alpha channel of vid_tensor is dropped; a GIF pixel is "
                          "opaque or fully transparent, so the video shows its colours as drawn",
                          UserWarning, stacklevel=2)  # fmt: skip
        self._pipe.submit_array(Kind.VIDEO, tag, step, wall, [part], options={"fps": rate})
