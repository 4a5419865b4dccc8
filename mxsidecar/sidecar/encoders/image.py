"""Images: the legacy ``Summary.Image`` holding a PNG, which both TensorBoard loaders read.

Contract (TensorBoard ``plugins/image/metadata.py``): plugin ``images``, content an
``ImagePluginData{version: 0}``.  We write ``Value.image`` (``height``, ``width``,
``colorspace`` 1/3/4, ``encoded_image_string`` = PNG) *without* metadata: the Python
loader (``data_compat._migrate_image_value``) turns it into the rank-1 DT_STRING tensor
``[b"width", b"height", png]`` with its own ``ImagePluginData{converted_to_tensor}``
metadata, and the Rust data server (``data_compat.rs``, ``tf1x_image_metadata``) does
the same for the blob sequence.  Metadata of our own would only be in the way: the
Rust loader takes any metadata that sets a data class verbatim.  Only the encoded
bytes, width and height reach the browser; ``colorspace`` is informational.  TensorBoard
keeps 10 images per tag by default (reservoir sampling, ``--samples_per_plugin``).

Conversions (the caller sends the array in its own dtype and layout, and has already
checked rank against ``dataformats`` and channels in {1, 3, 4}):

* uint8 is taken as is; float16/32/64 must lie in [0, 1] (else ValueError, NaN
  included) and becomes ``rint(x * 255)``.  mxboard truncates (``astype(uint8)``),
  which turns 0.999 into 254 and darkens the picture by half a level on average;
  rounding inverts ``x / 255`` exactly.  Other integer dtypes and bool are refused rather than
  guessed at (is an int32 image 0..255 or 0..65535?).
* a batch (``NCHW``/``NHWC``) becomes one image with torchvision's/mxboard's
  ``make_grid`` layout: ``ceil(sqrt(N))`` columns, 2 px of black around and between
  cells; a batch of one is the image itself, unpadded, as there.
* one channel stays grayscale (PNG mode ``L``; mxboard triples it into RGB, three
  times the pixels for the same picture), 3 is RGB, 4 is RGBA.

PNG: Pillow at ``compress_level=PNG_COMPRESS_LEVEL`` (1, zlib's fastest) instead of its
default 6.  Measured with Pillow 13 on this project's 2-core box (medians of 30): a
16x3x64x64 grid (266x266 RGB) of smooth content takes 4.8 ms / 120 KB at level 1 and
18.9 ms / 104 KB at level 6; a 3x224x224 image 4.3 ms / 54 KB vs 19.7 ms / 43 KB; on
noisy content both levels cost about the same (6-8 ms) and differ by 5%.  The sidecar is
one thread that also writes every scalar, so a 4x longer stall per image backs up the
queue the trainer waits on; 10-20% more bytes on disk is the cheaper side of the trade.
Change the constant, not the call, if a deployment wants the other side.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from ...formats.proto import plugin_image_pb2, summary_pb2
from ...wire.descriptors import Descriptor
from . import Encoded

PLUGIN_NAME = "images"
PROTO_VERSION = 0
PADDING = 2  # px between and around grid cells, as torchvision/mxboard/tensorboardX
PNG_COMPRESS_LEVEL = 1

DATAFORMATS = ("CHW", "HWC", "HW", "NCHW", "NHWC")
_DEFAULT_FORMATS = {2: "HW", 3: "CHW", 4: "NCHW"}  # mxboard's convention, if the caller sent none
_COLORSPACE = {1: 1, 3: 3, 4: 4}  # channels -> Summary.Image.colorspace (gray, RGB, RGBA)

__all__ = [
    "PLUGIN_NAME",
    "PROTO_VERSION",
    "create_summary_metadata",
    "encode",
    "image_pb",
    "make_grid",
    "png_bytes",
    "to_hwc_uint8",
    "to_uint8",
]


def create_summary_metadata() -> summary_pb2.SummaryMetadata:
    """The images plugin's metadata (for a native tensor form; legacy values carry none)."""
    content = plugin_image_pb2.ImagePluginData(version=PROTO_VERSION)
    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_BLOB_SEQUENCE)
    md.plugin_data.plugin_name = PLUGIN_NAME
    md.plugin_data.content = content.SerializeToString()
    return md


def _describe_bad(x: np.ndarray[Any, Any], lo: float, hi: float) -> str:
    nan = int(np.count_nonzero(np.isnan(x)))
    if nan:
        return f"{nan} NaN values"
    return f"values in [{float(np.min(x)):g}, {float(np.max(x)):g}], outside [{lo:g}, {hi:g}]"


def scale_float(x: np.ndarray[Any, Any], scale: float, lo: float, what: str) -> np.ndarray[Any, Any]:
    """``rint(x * scale)`` as float, after checking ``x`` lies in ``[lo, 1]``; never writes to ``x``.

    ``x`` may be a view into the shared-memory span, so the product is a new array and
    everything after it happens in place.  float16 is widened by the multiply itself, to
    float32 only where the product stays exact (11 significand bits times a ``scale`` of
    at most 13 bits, e.g. 255, fits float32's 24), else to float64: for audio's 32767 (15
    bits) a float32 product is rounded and ``rint`` then misplaces values lying near a
    half step.  float32 and float64 keep their own precision so a value on a rounding
    boundary rounds as the caller's dtype says.

    The range is checked on the product: scaling by ``scale > 1`` is monotonic and cannot
    carry a value across ``lo * scale`` or ``scale`` (``(1 + ulp) * scale`` exceeds
    ``scale`` by at least one of its own ulps, so it cannot round back down), so one
    min/max pass over the product decides, and min/max propagate NaN.
    """
    if x.dtype.kind != "f":
        raise ValueError(f"{what} must be float, got {x.dtype}")
    if x.size == 0:
        raise ValueError(f"{what} is empty (shape {x.shape})")
    work = x.dtype
    if x.dtype == np.float16:
        work = np.dtype(np.float32 if scale.is_integer() and scale < 2**13 else np.float64)
    y: np.ndarray[Any, Any] = np.multiply(x, scale, dtype=work)
    if not (y.min() >= lo * scale and y.max() <= scale):
        raise ValueError(f"float {what} must lie in [{lo:g}, 1]: {_describe_bad(x, lo, 1.0)}")
    np.rint(y, out=y)
    return y


def to_uint8(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """uint8 as is (a view, no copy); float in [0, 1] as ``rint(x * 255)``; anything else ValueError."""
    if x.dtype == np.uint8:
        if x.size == 0:
            raise ValueError(f"image is empty (shape {x.shape})")
        return x
    if x.dtype.kind != "f":
        raise ValueError(f"images must be float in [0, 1] or uint8, got {x.dtype}")
    # ``[0, 1]`` after scaling means ``[0, 255]``: the cast cannot wrap, so no clip is needed.
    return scale_float(x, 255.0, 0.0, "image").astype(np.uint8)


def to_hwc_uint8(array: np.ndarray[Any, Any], dataformats: str) -> np.ndarray[Any, Any]:
    """``array`` laid out as ``dataformats`` -> a ``(N, H, W, C)`` uint8 batch (N = 1 unless batched).

    The result may be a strided view (transposes are free; the copy happens once, in
    :func:`make_grid` or the PNG encoder).  Conversion to uint8 comes before the
    transpose so the gather touches 1-byte pixels.
    """
    if dataformats not in DATAFORMATS:
        raise ValueError(f"dataformats must be one of {DATAFORMATS}, got {dataformats!r}")
    if array.ndim != len(dataformats):
        raise ValueError(f"dataformats {dataformats!r} needs rank {len(dataformats)}, got shape {array.shape}")
    channels = array.shape[dataformats.index("C")] if "C" in dataformats else 1
    if channels not in _COLORSPACE:
        raise ValueError(f"images need 1, 3 or 4 channels, got {channels} (shape {array.shape}, {dataformats})")
    x = to_uint8(array)
    if dataformats == "HW":
        x = x[None, :, :, None]
    elif dataformats == "HWC":
        x = x[None]
    elif dataformats == "CHW":
        x = x.transpose(1, 2, 0)[None]
    elif dataformats == "NCHW":
        x = x.transpose(0, 2, 3, 1)
    return x


def grid_shape(n: int) -> tuple[int, int]:
    """(rows, columns) of the grid for ``n`` cells: ``ceil(sqrt(n))`` columns."""
    ncols = math.ceil(math.sqrt(n))
    return math.ceil(n / ncols), ncols


def make_grid(batch: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``(N, H, W, C)`` -> one ``(H', W', C)`` image; see the module docstring for the layout.

    Cell ``k`` sits at row ``k // ncols``, column ``k % ncols``, its top-left pixel at
    ``(2 + row * (H + 2), 2 + col * (W + 2))``; unused cells of the last row stay black.
    """
    n, h, w, c = batch.shape
    if n == 1:
        single: np.ndarray[Any, Any] = batch[0]
        return single
    nrows, ncols = grid_shape(n)
    grid = np.zeros((nrows * (h + PADDING) + PADDING, ncols * (w + PADDING) + PADDING, c), dtype=batch.dtype)
    for k in range(n):  # N is small (a batch shown as one picture); a loop beats a 5-D reshape for clarity
        top = PADDING + (k // ncols) * (h + PADDING)
        left = PADDING + (k % ncols) * (w + PADDING)
        grid[top : top + h, left : left + w] = batch[k]
    return grid


def pil_image(hwc: np.ndarray[Any, Any]) -> Any:
    """A Pillow image of an ``(H, W, C)`` uint8 array: mode L, RGB or RGBA by C."""
    from PIL import Image  # deferred: only the sidecar, and only once an image arrives, pays for Pillow

    if hwc.ndim != 3 or hwc.shape[2] not in _COLORSPACE or hwc.dtype != np.uint8:
        raise ValueError(f"expected (H, W, C) uint8 with C in 1, 3, 4; got {hwc.dtype} {hwc.shape}")
    pixels = np.ascontiguousarray(hwc[:, :, 0] if hwc.shape[2] == 1 else hwc)
    return Image.fromarray(pixels)


def png_bytes(hwc: np.ndarray[Any, Any]) -> bytes:
    buf = io.BytesIO()
    pil_image(hwc).save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buf.getvalue()


def image_value(tag: str, encoded: bytes, height: int, width: int, channels: int) -> summary_pb2.Summary.Value:
    v = summary_pb2.Summary.Value(tag=tag)
    im = v.image
    im.height = height
    im.width = width
    im.colorspace = _COLORSPACE[channels]
    im.encoded_image_string = encoded
    return v


def image_pb(tag: str, hwc: np.ndarray[Any, Any]) -> summary_pb2.Summary.Value:
    """The legacy image value of one ``(H, W, C)`` uint8 picture (a grid already made)."""
    h, w, c = hwc.shape
    return image_value(tag, png_bytes(hwc), h, w, c)


def encode(desc: Descriptor, data: Any) -> list[Encoded]:
    dataformats = (desc.options or {}).get("dataformats") or _DEFAULT_FORMATS.get(data.ndim, "")
    hwc = make_grid(to_hwc_uint8(data, dataformats))
    return [Encoded(desc.run, image_pb(desc.tag, hwc), None)]
