"""Embeddings for TensorBoard's projector, as bytes: the matrix (TSV text or raw
float32), the labels (``metadata.tsv``) and the thumbnails (``sprite.png``).

Pure array -> bytes, like the other encoders; ``output/projector.py`` writes the
files and names them in ``projector_config.pbtxt``.  What is refused and why (NaN in
the matrix, blank labels, sprites over 8192 px) is in that module's docstring.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .image import to_uint8

if TYPE_CHECKING:  # numpy.typing is 1.20+, and the annotations are never evaluated
    import numpy.typing as npt

__all__ = [
    "BLANK_LABEL",
    "MAX_SPRITE_PX",
    "is_utf8",
    "matrix",
    "metadata_tsv",
    "sprite_png",
    "tensor_bytes",
    "tsv_chunks",
]

# The front end refuses bigger sprites (data-provider.ts MAX_SPRITE_IMAGE_SIZE_PX).
MAX_SPRITE_PX = 8192
# The front end skips metadata lines that are blank after String.trim(), which would
# shift every later label onto the wrong point; such a label is written as this.
BLANK_LABEL = "<blank>"

_TSV_VALUES_PER_CHUNK = 1 << 16  # bounds the temporary strings of a large matrix
# Line breaks for TensorBoard's server (universal newlines turn \r into \n) or for
# str.splitlines, and the field separator: any of them would split a metadata row.
_ROW_BREAKERS = {ord(c): " " for c in "\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def matrix(mat: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    mat = np.asarray(mat)
    if mat.ndim != 2 or mat.shape[0] < 1 or mat.shape[1] < 1:
        raise ValueError(f"an embedding matrix must be (N, D) with N, D >= 1, not {mat.shape}")
    if mat.dtype.kind not in "biuf":
        raise ValueError(f"an embedding matrix must be real numbers, not {mat.dtype}")
    # TensorBoard reads float32 whatever was written; float64 beyond its range is Inf.
    with np.errstate(over="ignore"):
        out = mat.astype(np.float32, copy=False)
    bad = int(np.count_nonzero(~np.isfinite(out)))
    if bad:
        raise ValueError(
            f"embedding matrix has {bad} NaN/Inf values (or values beyond float32): "
            "the projector cannot place such points"
        )
    return out


def tsv_chunks(mat: npt.NDArray[np.float32]) -> Iterator[bytes]:
    """Rows of tab-separated floats with 9 significant digits, which round-trip every
    float32.  One '%' over a tuple of a block formats in C; ``np.savetxt`` is no
    faster (the float formatting dominates) and joins per row in Python."""
    n, d = mat.shape
    row = "\t".join(["%.9g"] * d) + "\n"
    rows = max(1, _TSV_VALUES_PER_CHUNK // d)
    for i in range(0, n, rows):
        block = mat[i : i + rows]
        yield ((row * len(block)) % tuple(block.ravel().tolist())).encode("ascii")


def is_utf8(buf: bytes | bytearray) -> bool:
    try:
        buf.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def tensor_bytes(mat: npt.NDArray[np.float32]) -> bytes:
    """``tensors.bytes``: raw little-endian float32 that TensorBoard reads as such.

    TensorBoard (``projector_plugin._read_tensor_tsv_file``) reads a tensor file as TSV
    first and takes it for binary only when UTF-8 decoding fails; bytes that happen to
    decode (all zeros, small powers of two) are parsed as text and fail.  If the matrix
    holds a +0.0, it is written as -0.0 (``00 00 00 80``): the same number to every
    computation the projector makes, and a lone continuation byte no UTF-8 decoder
    accepts.  Without a zero there is no such spelling: ValueError.
    """
    buf = bytearray(mat.astype("<f4", copy=False).tobytes())
    if not is_utf8(buf):
        return bytes(buf)
    zeros = np.flatnonzero(np.frombuffer(buf, dtype="<u4") == 0)
    if zeros.size:
        # The bytes before it decoded whole and this word is 00 00 00, so the 0x80 that
        # ends it starts a character and cannot be one.
        buf[4 * int(zeros[0]) + 3] = 0x80
        return bytes(buf)
    raise ValueError(
        "tensor_format='bytes': this matrix's float32 bytes are valid UTF-8 text, which "
        "TensorBoard would parse as TSV and fail; log it with tensor_format='tsv'"
    )


def _cell(v: Any) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    if isinstance(v, (bool, int, float)):
        return str(v)
    raise ValueError(f"a label must be a string or a number, not {type(v).__name__}")


def _array_cells(labels: npt.NDArray[Any], n: int) -> list[str]:
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be one value per point, shape (N,), not {labels.shape}")
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} points")
    kind = labels.dtype.kind
    if kind in "iub":
        return [str(v) for v in labels.tolist()]
    if kind != "f":
        raise ValueError(f"label arrays must be numeric, not {labels.dtype}")
    # MXNet arrays are float32 by default, so class ids arrive as 3.0: show them as 3.
    finite = np.isfinite(labels)
    if finite.all() and np.array_equal(labels, np.rint(labels)) and np.abs(labels).max() < 2**53:
        return [str(int(v)) for v in labels.tolist()]
    return [str(v) for v in labels]  # numpy scalars print their shortest repr for the dtype


def _table(text: str, labels: npt.NDArray[Any] | None, n: int) -> list[list[str]] | None:
    if text and labels is not None:
        raise ValueError("labels given both as a list and as an array")
    if labels is not None:
        return [[c] for c in _array_cells(labels, n)]
    if not text:
        return None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"labels are not valid JSON: {exc}") from None
    if not isinstance(values, list):
        raise ValueError("labels must be a list")
    if len(values) != n:
        raise ValueError(f"{len(values)} labels for {n} points")
    rows_given = [isinstance(v, list) for v in values]
    if not any(rows_given):
        return [[_cell(v)] for v in values]
    if not all(rows_given):
        raise ValueError("labels must be all values (one column) or all rows (several columns), not a mix")
    width = len(values[0])
    if width < 1 or any(len(r) != width for r in values):
        raise ValueError("every label row must have the same number (>= 1) of columns")
    return [[_cell(v) for v in r] for r in values]


def _is_blank(s: str) -> bool:
    # String.trim() also strips U+FEFF, which str.strip() keeps.
    return not s.replace("\ufeff", "").strip()


def metadata_tsv(text: str, labels: npt.NDArray[Any] | None, header: Sequence[Any] | None, n: int) -> bytes | None:
    """metadata.tsv under TensorBoard's header rule (data-provider.ts parseMetadata,
    and the server's row count): a first line with a tab is a header row.  So one
    column has no header (a given ``metadata_header`` is not written) and several
    columns always have one."""
    table = _table(text, labels, n)
    if table is None:
        return None
    width = len(table[0])
    lines: list[str] = []
    if width > 1:
        names = [str(h) for h in header] if header else [f"label_{i}" for i in range(width)]
        if len(names) != width:
            raise ValueError(f"metadata_header has {len(names)} names for {width} label columns")
        names = [h.translate(_ROW_BREAKERS) for h in names]
        if any(_is_blank(h) for h in names) or len(set(names)) != width:
            raise ValueError("metadata_header names must be non-blank and distinct")
        lines.append("\t".join(names))
    for row in table:
        cells = [c.translate(_ROW_BREAKERS) for c in row]
        if all(_is_blank(c) for c in cells):
            cells[0] = BLANK_LABEL
        lines.append("\t".join(cells))
    lines.append("")
    # TensorBoard decodes strictly; a lone surrogate (JSON allows "\ud800") becomes '?'.
    return "\n".join(lines).encode("utf-8", "replace")


def sprite_png(images: npt.NDArray[Any], n: int) -> tuple[bytes, tuple[int, int]]:
    """PNG of the thumbnails, row-major in a ceil(sqrt(N)) square grid without padding.

    The grid must be square in tiles: the front end's shader finds a tile's row by
    dividing by tiles-per-column, so the sheet is side*W by side*H even when the
    last row is short (its empty tiles stay zero)."""
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[0] != n or images.shape[1] not in (1, 3, 4):
        raise ValueError(f"images must be (N={n}, C in 1/3/4, H, W), not {images.shape}")
    _, c, h, w = images.shape
    if h < 1 or w < 1:
        raise ValueError(f"images must be at least 1x1, not {h}x{w}")
    side = math.isqrt(n)
    side += side * side < n
    if side * w > MAX_SPRITE_PX or side * h > MAX_SPRITE_PX:
        raise ValueError(
            f"sprite of {side}x{side} thumbnails of {w}x{h} px would be {side * w}x{side * h} px; "
            f"TensorBoard shows at most {MAX_SPRITE_PX} px a side (use smaller thumbnails)"
        )
    pix = to_uint8(images)  # exactly as image summaries convert pixels
    sheet = np.zeros((side * side, h, w, c), np.uint8)
    sheet[:n] = pix.transpose(0, 2, 3, 1)
    sheet = sheet.reshape(side, side, h, w, c).transpose(0, 2, 1, 3, 4).reshape(side * h, side * w, c)
    from PIL import Image  # only embeddings with images pay for loading Pillow

    # Modes from the shape: (h, w) uint8 is L, (h, w, 3) RGB, (h, w, 4) RGBA.
    img = Image.fromarray(sheet[:, :, 0] if c == 1 else sheet)
    buf = io.BytesIO()
    # Level 1: about 3x faster than the default on sparse (MNIST-like) sheets, ~15% larger.
    img.save(buf, "PNG", compress_level=1)
    return buf.getvalue(), (w, h)
