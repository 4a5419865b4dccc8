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
  4 is accepted and its alpha **dropped**: GIF transparency is one palette index, on
  or off, so a soft alpha cannot survive; dropping it shows the colours the caller
  drew instead of refusing the whole clip.
* The frame delay is ``1000 / fps`` ms rounded to GIF's unit, the centisecond (Pillow
  would truncate), and at least 20 ms: browsers replace delays of 10 ms or less with
  100 ms, so an fps above 50 would play up to 10x *slower* than asked; above 50 fps the
  clip plays at 50.  ``loop=0`` repeats forever.
* Pillow merges consecutive identical frames into one frame of summed delay, so the
  GIF may hold fewer frames than T while playing for the same time.
"""

from __future__ import annotations

import io
import math
import numbers
import struct
from typing import Any

import numpy as np

from ...formats.proto import summary_pb2
from ...wire.descriptors import Descriptor
from . import Encoded
from .image import PROTO_VERSION, image_value, make_grid, pil_image, to_uint8
from .image import create_summary_metadata as create_summary_metadata

PLUGIN_NAME = "images"  # a video is an image to TensorBoard
MIN_FRAME_MS = 20  # browsers clamp GIF delays <= 10 ms to 100 ms
MAX_FRAME_MS = 655_350  # the delay field is a u16 of centiseconds

__all__ = [
    "PLUGIN_NAME",
    "PROTO_VERSION",
    "create_summary_metadata",
    "encode",
    "frame_duration_ms",
    "gif_bytes",
    "video_frames",
    "video_pb",
]


def frame_duration_ms(fps: Any) -> int:
    """The GIF delay for ``fps``: whole centiseconds, clamped to what browsers honour."""
    rate = float(fps) if isinstance(fps, numbers.Real) and not isinstance(fps, bool) else math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"fps must be a positive finite number, got {fps!r}")
    centis = 100.0 / rate
    if not math.isfinite(centis):  # a subnormal fps
        return MAX_FRAME_MS
    return int(min(MAX_FRAME_MS, max(MIN_FRAME_MS, 10 * round(centis))))


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


def gif_bytes(frames: list[np.ndarray[Any, Any]], duration_ms: int) -> bytes:
    """An endlessly looping animated GIF of equally sized ``(H, W, C)`` uint8 frames."""
    if not frames:
        raise ValueError("a video needs at least one frame")
    images = [pil_image(f) for f in frames]
    # Pillow merges runs of identical frames and sums their delays, which must still fit
    # GIF's u16 centiseconds: cap the delay so even a clip of one repeated frame fits.
    duration_ms = max(MIN_FRAME_MS, min(duration_ms, MAX_FRAME_MS // len(images) // 10 * 10))
    buf = io.BytesIO()
    try:
        images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
    except (struct.error, OverflowError) as exc:
        # A u16 overflowed: a grid wider than 65535 px, or a run of identical frames whose
        # merged delay exceeds 655 s.  The clip is refused, not the sidecar brought down.
        raise ValueError(f"video cannot be written as a GIF ({exc})") from exc
    return buf.getvalue()


def video_pb(tag: str, frames: list[np.ndarray[Any, Any]], fps: float) -> summary_pb2.Summary.Value:
    h, w, c = frames[0].shape
    return image_value(tag, gif_bytes(frames, frame_duration_ms(fps)), h, w, c)


def encode(desc: Descriptor, data: Any) -> list[Encoded]:
    fps = (desc.options or {}).get("fps", 4)  # tensorboardX's default
    frame_duration_ms(fps)  # a bad fps fails before any frame is built
    return [Encoded(desc.run, video_pb(desc.tag, video_frames(data), fps), None)]
