"""Embeddings (``add_embedding``): a matrix, labels and thumbnails for the projector.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/embedding.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

import codecs
import json
import math
from typing import Any

import numpy as np

from ...wire.descriptors import Kind
from .. import arguments as v
from ._base import KindCalls

__all__ = ["EmbeddingCalls"]

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
    if n > v.MAX_NAME_PART_BYTES:
        raise ValueError(f"{name} of an embedding becomes a directory name: at most {v.MAX_NAME_PART_BYTES} bytes "
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


def check_tensor_bytes(arr: np.ndarray[Any, Any], name: str = "embedding") -> None:
    """``tensor_format='bytes'`` on host data: refuse here what the sidecar would
    (``encoders/embedding.py`` ``tensor_bytes``): float32 bytes that decode as UTF-8,
    which TensorBoard would read as text, with no +0.0 to spell as -0.0 to prevent it."""
    raw = np.ascontiguousarray(arr, dtype="<f4")
    try:
        codecs.utf_8_decode(raw.data, "strict", True)  # random floats fail in the first bytes
    except UnicodeDecodeError:
        return
    if not np.any(raw.view("<u4") == 0):
        raise ValueError(f"tensor_format='bytes': the float32 bytes of {name} are valid UTF-8 text, which "
                         "TensorBoard would parse as TSV and fail; log it with tensor_format='tsv'")  # fmt: skip


def check_sprite(shape: tuple[int, ...]) -> None:
    n, _, h, w = shape
    side = math.ceil(math.sqrt(n))
    if side * max(h, w) > MAX_SPRITE_PX:
        raise ValueError(f"images make a sprite of {side}x{side} thumbnails of {h}x{w} px: "
                         f"{side * max(h, w)} px a side, over TensorBoard's limit of {MAX_SPRITE_PX}")  # fmt: skip


class EmbeddingCalls(KindCalls):
    # -- embeddings and pr curves -------------------------------------------------
    def add_embedding(
        self,
        tag: str,
        embedding: Any,
        labels: Any = None,
        images: Any = None,
        global_step: int | None = None,
        metadata_header: list[str] | None = None,
        tensor_format: str = "tsv",
    ) -> None:
        """Log points for TensorBoard's Projector, with optional labels and thumbnails.

        The sidecar writes ``<logdir>/<step:05d>/<tag>/`` (tensors, ``metadata.tsv``,
        ``sprite.png``) and merges an entry into ``<logdir>/projector_config.pbtxt``,
        keeping other writers' entries, replacing this tag and step's.

        Parameters
        ----------
        tag : str
            Name of the embedding (a path component after escaping '/', so not '.' or '..').
        embedding : NDArray or numpy array of shape (N, D)
            One row per point.
        labels : list, numpy array or NDArray, optional
            N labels (one column), or N rows of equal length (several columns, named by
            ``metadata_header``).
        images : NDArray or numpy array of shape (N, C, H, W), optional
            Thumbnails (float in [0, 1] or uint8, C of 1, 3 or 4) for the sprite, at most
            8192 px a side in all.
        global_step : int or None
            The step in the directory name and the tensor name; None means 0.
        metadata_header : list of str, optional
            Column names when labels have several columns.
        tensor_format : 'tsv' or 'bytes'
            ``tensors.tsv``, or TensorBoard's raw float32 file ``tensors.bytes`` (smaller,
            faster to load).  TensorBoard takes a tensor file for binary only if it does
            not decode as UTF-8: a matrix whose bytes do (all zeros, small powers of two)
            is written with one +0.0 as -0.0, the same value; one without a zero is
            refused (``ValueError`` here for numpy input; for an NDArray the sidecar
            refuses it, counted in ``stats()['rejected']`` and warned).
        """
        tag, step, wall = self._common(tag, global_step, None)
        if tag in (".", ".."):
            raise ValueError(f"tag of an embedding becomes a directory name; {tag!r} would escape the logdir")
        check_embedding_tag(tag)
        if tensor_format not in ("tsv", "bytes"):
            raise ValueError(f"tensor_format must be 'tsv' or 'bytes', got {tensor_format!r}")
        mat, mat_arr = self._part("mat", embedding)
        if len(mat.shape) != 2:
            raise ValueError(f"embedding must be a matrix (N, D), got shape {mat.shape}")
        if mat_arr is not None:
            check_embedding_matrix(mat_arr)
            if tensor_format == "bytes" and mat_arr.size:
                check_tensor_bytes(mat_arr)
        n = mat.shape[0]
        parts = [mat]
        text = ""
        header = None
        if labels is not None:
            if isinstance(labels, (list, tuple)):
                rows, header = check_labels(labels, n, metadata_header)
                text = json.dumps(rows)
            else:
                if metadata_header is not None:
                    raise ValueError("metadata_header applies to labels given as rows (a list of lists)")
                lab, _ = self._part("labels", labels)
                if len(lab.shape) != 1 or lab.shape[0] != n:
                    raise ValueError(f"labels must hold {n} entries (one per embedding row), got shape {lab.shape}")
                parts.append(lab)
        elif metadata_header is not None:
            raise ValueError("metadata_header is given but labels are not")
        if images is not None:
            img = self._image_part("images", images)
            v.check_dataformats("NCHW", img.shape, "images")
            if img.shape[0] != n:
                raise ValueError(f"images must hold {n} thumbnails (one per embedding row), got {img.shape[0]}")
            check_sprite(img.shape)
            parts.append(img)
        options = {"metadata_header": header, "tensor_format": tensor_format}
        self._pipe.submit_array(Kind.EMBEDDING, tag, step, wall, parts, text=text, options=options, named=True)
