"""Embeddings for TensorBoard's projector: files plus ``projector_config.pbtxt``.

The projector reads no events: it reads a text-format ``ProjectorConfig`` and the
files it names.  This is the one module of the sidecar that writes such files.

Layout (tensorboardX's, which fixed per-call collisions in tensorboardX PR #94)::

    <logdir>/projector_config.pbtxt          run '.', the default for every run
    <logdir>/<step:05d>/<escaped tag>/tensors.tsv | tensors.bytes
                                      metadata.tsv    (when labels were given)
                                      sprite.png      (when images were given)

``tensor_name`` is ``"<tag>:<step:05d>"``, every path in the config is relative to
the config's directory and inside it (TensorBoard PR #7115 refuses anything else).

Crash safety: the config only ever names complete files.  Data files are written to
temporary names, fsynced and renamed into place; the config is rewritten last, the
same way.  Re-logging a tag/step whose directory the config already names first
drops that entry from the config, so a crash while the files are being replaced
leaves the config naming nothing there rather than a mix of old and new files.

Decisions:

* NaN or Inf in the matrix is refused (ValueError; the sidecar sends a Notice and
  writes nothing): TensorBoard would serve it, but the projector's PCA, t-SNE and
  UMAP turn every coordinate into NaN and draw nothing.
* ``tensor_format`` defaults to ``"tsv"``, what every other writer produces and what
  every TensorBoard version reads.  ``"bytes"`` (raw little-endian float32 plus
  ``tensor_shape``) is faster to write and for TensorBoard to load, but TensorBoard
  (2.21, ``_read_tensor_binary_file``) only falls back to it when decoding the file
  as UTF-8 text *fails*; a matrix whose bytes happen to be valid UTF-8 (all zeros,
  small powers of two) would be parsed as TSV and fail, so it is written as TSV.
* An existing config that does not parse is left untouched and the embedding is
  refused (ValueError): rewriting it would drop the other writers' entries.
* Labels that would leave a blank metadata line are written as ``BLANK_LABEL``: the
  front end skips blank lines, which would put every later label on the wrong point.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import posixpath
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy.typing is 1.20+, and the annotations are never evaluated
    import numpy.typing as npt

import numpy as np
from google.protobuf import text_format

from .encoders.image import to_uint8
from .messages import Descriptor
from .proto import projector_config_pb2

__all__ = ["BLANK_LABEL", "CONFIG_NAME", "MAX_SPRITE_PX", "tag_dir_name", "tensor_name", "write_embedding"]

CONFIG_NAME = "projector_config.pbtxt"
TENSORS_TSV = "tensors.tsv"
TENSORS_BYTES = "tensors.bytes"
METADATA_TSV = "metadata.tsv"
SPRITE_PNG = "sprite.png"
_DATA_FILES = (TENSORS_TSV, TENSORS_BYTES, METADATA_TSV, SPRITE_PNG)

# The front end refuses bigger sprites (data-provider.ts MAX_SPRITE_IMAGE_SIZE_PX).
MAX_SPRITE_PX = 8192
# The front end skips metadata lines that are blank after String.trim(), which would
# shift every later label onto the wrong point; such a label is written as this.
BLANK_LABEL = "<blank>"

_NAME_MAX = 255  # bytes in one path component on every file system we run on
_TSV_VALUES_PER_CHUNK = 1 << 16  # bounds the temporary strings of a large matrix
# Line breaks for TensorBoard's server (universal newlines turn \r into \n) or for
# str.splitlines, and the field separator: any of them would split a metadata row.
_ROW_BREAKERS = {ord(c): " " for c in "\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def tensor_name(tag: str, step: int) -> str:
    return f"{tag}:{step:05d}"


def tag_dir_name(tag: str) -> str:
    """The tag as one path component: tensorboardX's escapes, plus '.' and '..',
    which would otherwise name the step directory or the logdir itself."""
    if not tag:
        raise ValueError("an embedding needs a non-empty tag")
    name = tag.replace("%", "%25").replace("/", "%2F").replace("\\", "%5C")
    if name in (".", ".."):
        name = name.replace(".", "%2E")
    if len(name.encode("utf-8", "surrogateescape")) > _NAME_MAX:
        raise ValueError(f"tag {tag[:40]!r}... is too long for a directory name once escaped ({_NAME_MAX} bytes)")
    return name


def write_embedding(logdir: str, desc: Descriptor, data: dict[str, npt.NDArray[Any]]) -> list[str]:
    """Write one embedding under ``logdir`` and name it in its projector config.

    Returns the paths written, the config last.  Everything is validated and
    encoded (except the TSV text, streamed) before the first file is touched.
    """
    opts = desc.options or {}
    tensor_format = opts.get("tensor_format") or "tsv"
    if tensor_format not in ("tsv", "bytes"):
        raise ValueError(f"tensor_format must be 'tsv' or 'bytes', not {tensor_format!r}")
    if not data or data.get("mat") is None:
        raise ValueError("an embedding needs its matrix ('mat')")
    mat = _matrix(data["mat"])
    n, d = mat.shape
    metadata = _metadata(desc.text, data.get("labels"), opts.get("metadata_header"), n)
    sprite = _sprite(data["images"], n) if data.get("images") is not None else None
    raw: bytes | None = None
    if tensor_format == "bytes":
        raw = mat.astype("<f4", copy=False).tobytes()
        if _is_utf8(raw):
            raw = None  # TensorBoard would read it as TSV (see the module docstring)

    name = tensor_name(desc.tag, desc.step)
    step_dir, tag_dir = f"{desc.step:05d}", tag_dir_name(desc.tag)
    rel_dir = posixpath.join(step_dir, tag_dir)
    abs_dir = os.path.join(logdir, step_dir, tag_dir)
    config_path = os.path.join(logdir, CONFIG_NAME)
    os.makedirs(logdir, exist_ok=True)
    with _dir_lock(logdir):
        _check_inside(logdir, abs_dir)
        config = _read_config(config_path)  # refuse a broken config before writing anything
        at = _remove_ours(config, name, rel_dir)
        if at is not None:
            _write_config(config_path, config)  # unname the files about to be replaced

        os.makedirs(abs_dir, exist_ok=True)
        written: list[str] = []
        tensors = TENSORS_TSV if raw is None else TENSORS_BYTES
        if raw is None:
            written.append(_write_file(abs_dir, tensors, _tsv_chunks(mat)))
        else:
            written.append(_write_file(abs_dir, tensors, [raw]))
        if metadata is not None:
            written.append(_write_file(abs_dir, METADATA_TSV, [metadata]))
        if sprite is not None:
            written.append(_write_file(abs_dir, SPRITE_PNG, [sprite[0]]))
        for stale in _DATA_FILES:  # a previous call's files this call did not replace
            path = os.path.join(abs_dir, stale)
            if path not in written:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        for path in (abs_dir, os.path.dirname(abs_dir), logdir):
            _fsync_dir(path)  # the new entries must be durable before the config names them

        entry = projector_config_pb2.EmbeddingInfo(tensor_name=name)
        entry.tensor_path = posixpath.join(rel_dir, tensors)
        entry.tensor_shape.extend([n, d])
        if metadata is not None:
            entry.metadata_path = posixpath.join(rel_dir, METADATA_TSV)
        if sprite is not None:
            entry.sprite.image_path = posixpath.join(rel_dir, SPRITE_PNG)
            entry.sprite.single_image_dim.extend(sprite[1])

        # Read again: another writer (mxboard appends) may have added entries since.
        config = _read_config(config_path)
        again = _remove_ours(config, name, rel_dir)
        _write_config(config_path, _inserted(config, entry, at if at is not None else again))
    written.append(config_path)
    return written


# -- validation and encoding ---------------------------------------------------


def _matrix(mat: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
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


def _tsv_chunks(mat: npt.NDArray[np.float32]) -> Iterator[bytes]:
    """Rows of tab-separated floats with 9 significant digits, which round-trip every
    float32.  One '%' over a tuple of a block formats in C; ``np.savetxt`` is no
    faster (the float formatting dominates) and joins per row in Python."""
    n, d = mat.shape
    row = "\t".join(["%.9g"] * d) + "\n"
    rows = max(1, _TSV_VALUES_PER_CHUNK // d)
    for i in range(0, n, rows):
        block = mat[i : i + rows]
        yield ((row * len(block)) % tuple(block.ravel().tolist())).encode("ascii")


def _is_utf8(buf: bytes) -> bool:
    try:
        buf.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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


def _metadata(text: str, labels: npt.NDArray[Any] | None, header: Sequence[Any] | None, n: int) -> bytes | None:
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


def _sprite(images: npt.NDArray[Any], n: int) -> tuple[bytes, tuple[int, int]]:
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


# -- files ----------------------------------------------------------------------


def _write_file(directory: str, name: str, chunks: Iterable[bytes]) -> str:
    """Write ``name`` whole or not at all: a reader (TensorBoard serving a config it
    cached) sees the old file or the new one, never a prefix."""
    path = os.path.join(directory, name)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the file from a TensorBoard run by another user
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; rename order is all we get
    finally:
        os.close(fd)


def _check_inside(logdir: str, path: str) -> None:
    """TensorBoard resolves symlinks and refuses assets outside the config's directory;
    refuse here what it would refuse (a step directory symlinked elsewhere).  The
    path need not exist yet: realpath resolves the part that does."""
    root = os.path.realpath(logdir)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise ValueError(f"{path!r} resolves outside {logdir!r}; TensorBoard would not serve it")


@contextlib.contextmanager
def _dir_lock(path: str) -> Iterator[None]:
    """Serialise read-modify-write of the config among our own sidecars sharing a
    logdir.  Other writers (mxboard, tensorboardX, torch) take no lock."""
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # e.g. NFS without flock on directories: proceed unlocked
        yield
    finally:
        os.close(fd)  # releases the lock


# -- config ---------------------------------------------------------------------


def _read_config(path: str) -> projector_config_pb2.ProjectorConfig:
    config = projector_config_pb2.ProjectorConfig()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return config
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc}); left as it is, embedding not written") from None
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ValueError(
            f"{path} is not a valid ProjectorConfig ({exc}); left as it is, embedding not written"
        ) from None
    return config


def _remove_ours(config: projector_config_pb2.ProjectorConfig, name: str, rel_dir: str) -> int | None:
    """Drop the entries for ``name`` or naming files in ``rel_dir`` (another writer's
    entry for the directory we overwrite would describe files that are gone); the
    index of the first one dropped, or None."""
    prefix = rel_dir + "/"

    def ours(e: projector_config_pb2.EmbeddingInfo) -> bool:
        if e.tensor_name == name:
            return True
        paths = (e.tensor_path, e.metadata_path, e.bookmarks_path, e.sprite.image_path)
        return any(p and posixpath.normpath(p.replace("\\", "/")).startswith(prefix) for p in paths)

    hits = [i for i, e in enumerate(config.embeddings) if ours(e)]
    for i in reversed(hits):
        del config.embeddings[i]
    return hits[0] if hits else None


def _inserted(
    config: projector_config_pb2.ProjectorConfig, entry: projector_config_pb2.EmbeddingInfo, at: int | None
) -> projector_config_pb2.ProjectorConfig:
    """``config`` with ``entry`` where the entry it replaces was (the projector lists
    embeddings in config order), else last."""
    out = projector_config_pb2.ProjectorConfig()
    out.CopyFrom(config)
    if at is None or at >= len(config.embeddings):
        out.embeddings.append(entry)
        return out
    del out.embeddings[:]
    for i, e in enumerate(config.embeddings):
        if i == at:
            out.embeddings.append(entry)
        out.embeddings.append(e)
    return out


def _write_config(path: str, config: projector_config_pb2.ProjectorConfig) -> None:
    directory = os.path.dirname(path) or "."
    _write_file(directory, os.path.basename(path), [text_format.MessageToString(config).encode("utf-8")])
    _fsync_dir(directory)
