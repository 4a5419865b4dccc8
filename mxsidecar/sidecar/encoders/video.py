"""Video: an animated GIF inside a legacy ``Summary.Image``, as tensorboardX's and torch's
``add_video`` write it; TensorBoard's Images tab shows it, and the browser animates it.

Contract: the images plugin's (``images``, ``ImagePluginData{version: 0}``; see
:mod:`.image`), value ``Value.image`` with ``encoded_image_string`` = GIF bytes and no
metadata.  TensorBoard never decodes the blob: both loaders pass ``[width, height,
blob]`` through, so a GIF works wherever a PNG does.

Data ``(N, T, C, H, W)`` (tensorboardX's layout), float in [0, 1] or uint8 exactly as
for images.  Frame ``t`` is the grid (:func:`.image.make_grid`) of the N videos' frame
``t``.  tensorboardX pads N to a power of two and lays the grid out its own way; we
reuse the image grid so a batch looks the same in ``add_images`` and ``add_video``.

Decisions and their reasons:

* Channels 1 (grayscale, GIF palette of 256 greys: lossless) or 3 (RGB, quantised by
  Pillow to an adaptive 256-colour palette per frame: lossy, as every GIF writer is).
  4 is accepted and its alpha **dropped** (the writer warns at the call): GIF
  transparency is one palette index, on or off, so a soft alpha cannot survive;
  dropping it shows the colours the caller drew instead of refusing the whole clip.
* Frame delays are whole centiseconds (GIF's unit; Pillow truncates milliseconds), so
  ``1000 / fps`` ms is not always a delay: each frame gets the delay that ends it
  closest to ``(i + 1) / fps`` s after the start (``formats/gif.py``, whose schedule
  the writer checks clips against too: 30 fps is 3, 3, 4 cs, ...), and the clip plays
  at ``fps`` on average, drifting by at most 5 ms.
  Browsers replace delays under 2 cs with 10 cs, so above 50 fps a clip would play up
  to 5x *slower* than asked: frames there last 2 cs and the clip plays at 50 fps (the
  writer warns at the call).  A delay is a u16: a frame lasts at most 655.35 s (the
  writer refuses fps below ``MIN_FPS``).  ``loop=0`` repeats forever.
* Pillow merges consecutive identical frames into one frame of summed delay, so the
  GIF may hold fewer frames than T while playing for the same time; a run of identical
  frames that would last over 655.35 s cannot be written and is refused (ValueError),
  never shortened.
"""

from __future__ import annotations

import io
import math
import numbers
import struct
from typing import Any

import numpy as np

from ...formats import gif
from ...formats.gif import MAX_FPS, MAX_FRAME_CS, MIN_FPS
from ...formats.proto import summary_pb2
from ...wire.descriptors import Descriptor
from . import Encoded
from .image import PROTO_VERSION, image_value, make_grid, pil_image, to_uint8
from .image import create_summary_metadata as create_summary_metadata

PLUGIN_NAME = "images"  # a video is an image to TensorBoard

__all__ = [
    "MAX_FPS",
    "MIN_FPS",
    "PLUGIN_NAME",
    "PROTO_VERSION",
    "create_summary_metadata",
    "encode",
    "frame_delays_cs",
    "gif_bytes",
    "video_frames",
    "video_pb",
]


def frame_delays_cs(fps: Any, n: int) -> list[int]:
    """The GIF delays of ``n`` frames at ``fps``, in centiseconds: ``formats/gif.py``'s
    schedule (the writer checks clips against the same one), once ``fps`` is a rate a
    GIF can hold; ValueError otherwise."""
    rate = float(fps) if isinstance(fps, numbers.Real) and not isinstance(fps, bool) else math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"fps must be a positive finite number, got {fps!r}")
    if rate < MIN_FPS:
        raise ValueError(f"fps must be at least {MIN_FPS:.6g}: a GIF frame lasts at most 655.35 s, got {fps!r}")
    return gif.frame_delays_cs(rate, n)


def video_frames(data: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
    """``(N, T, C, H, W)`` -> T grid frames, each ``(H', W', C')`` uint8 with C' 1 or 3."""
    if data.ndim != 5:
        raise ValueError(f"video must be (N, T, C, H, W), got shape {data.shape}")
    c = data.shape[2]
    if c not in (1, 3, 4):
        raise ValueError(f"video frames need 1, 3 or 4 channels, got {c} (shape {data.shape})")
    if c == 4:
        data = data[:, :, :3]  # before the conversion: no work spent on the alpha we drop
    v = to_uint8(data)
    # (N, T, C, H, W) -> (T, N, H, W, C): frame t's batch is then v[t], still a view
    v = v.transpose(1, 0, 3, 4, 2)
    return [np.ascontiguousarray(make_grid(v[t])) for t in range(v.shape[0])]


def gif_bytes(frames: list[np.ndarray[Any, Any]], delays_cs: list[int]) -> bytes:
    """An endlessly looping animated GIF of equally sized ``(H, W, C)`` uint8 frames."""
    if not frames:
        raise ValueError("a video needs at least one frame")
    if len(delays_cs) != len(frames):
        raise ValueError(f"{len(frames)} frames need as many delays, got {len(delays_cs)}")
    # Pillow merges runs of identical frames, summing their delays into one u16: a run
    # that long cannot be shown for its time, so it is refused rather than shortened.
    run = gif.overlong_still(delays_cs, lambda t, s: np.array_equal(frames[t], frames[s]))
    if run is not None:
        first, last, held = run
        raise ValueError(f"video frames {first}..{last} are identical and would show for {held / 100:g} s "
                         f"as one GIF frame, which lasts at most {MAX_FRAME_CS / 100:g} s")  # fmt: skip
    images = [pil_image(f) for f in frames]
    buf = io.BytesIO()
    try:
        images[0].save(
            buf, format="GIF", save_all=True, append_images=images[1:], duration=[10 * d for d in delays_cs], loop=0
        )
    except (struct.error, OverflowError) as exc:
        # A u16 overflowed: a grid wider than 65535 px, or frames that differ but became
        # identical once quantised, merged past 655.35 s.  The clip is refused, not the
        # sidecar brought down.
        raise ValueError(f"video cannot be written as a GIF ({exc})") from exc
    return buf.getvalue()


def video_pb(tag: str, frames: list[np.ndarray[Any, Any]], fps: float) -> summary_pb2.Summary.Value:
    h, w, c = frames[0].shape
    return image_value(tag, gif_bytes(frames, frame_delays_cs(fps, len(frames))), h, w, c)


def encode(desc: Descriptor, data: Any) -> list[Encoded]:
    fps = (desc.options or {}).get("fps", 4)  # tensorboardX's default
    frame_delays_cs(fps, 0)  # a bad fps fails before any frame is built
    return [Encoded(desc.run, video_pb(desc.tag, video_frames(data), fps), None)]
