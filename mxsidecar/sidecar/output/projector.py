"""Embeddings for TensorBoard's projector: files plus ``projector_config.pbtxt``.

The projector reads no events: it reads a text-format ``ProjectorConfig`` and the
files it names.  This module decides which files and what config; ``storage`` writes them and
``encoders/embedding.py`` makes their bytes.

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
  as UTF-8 text *fails*.  A matrix whose bytes happen to be valid UTF-8 (all zeros,
  small powers of two) is written with one +0.0 as -0.0, which makes the file
  undecodable and changes no value; one without a zero is refused (ValueError, and
  for numpy input the writer refuses it at the call): ``encoders/embedding.py``
  ``tensor_bytes``.  It is never written as TSV when bytes were asked for.
* An existing config that does not parse is left untouched and the embedding is
  refused (ValueError): rewriting it would drop the other writers' entries.
* Labels that would leave a blank metadata line are written as ``BLANK_LABEL``: the
  front end skips blank lines, which would put every later label on the wrong point.
"""

from __future__ import annotations

import os
import posixpath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy.typing is 1.20+, and the annotations are never evaluated
    import numpy.typing as npt

from google.protobuf import text_format

from ...formats.proto import projector_config_pb2
from ...wire.descriptors import Descriptor
from ..encoders import embedding
from ..encoders.embedding import BLANK_LABEL, MAX_SPRITE_PX
from .storage import LocalDirectory

__all__ = ["BLANK_LABEL", "CONFIG_NAME", "MAX_SPRITE_PX", "tag_dir_name", "tensor_name", "write_embedding"]

CONFIG_NAME = "projector_config.pbtxt"
TENSORS_TSV = "tensors.tsv"
TENSORS_BYTES = "tensors.bytes"
METADATA_TSV = "metadata.tsv"
SPRITE_PNG = "sprite.png"
_DATA_FILES = (TENSORS_TSV, TENSORS_BYTES, METADATA_TSV, SPRITE_PNG)

_NAME_MAX = 255  # bytes in one path component on every file system we run on


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


def write_embedding(out: LocalDirectory, run: str, desc: Descriptor, data: dict[str, npt.NDArray[Any]]) -> list[str]:
    """Write one embedding in run ``run`` of ``out`` and name it in that run's projector config.

    Returns the paths written, the config last.  Everything is validated and
    encoded (except the TSV text, streamed) before the first file is touched.
    """
    opts = desc.options or {}
    tensor_format = opts.get("tensor_format") or "tsv"
    if tensor_format not in ("tsv", "bytes"):
        raise ValueError(f"tensor_format must be 'tsv' or 'bytes', not {tensor_format!r}")
    if not data or data.get("mat") is None:
        raise ValueError("an embedding needs its matrix ('mat')")
    mat = embedding.matrix(data["mat"])
    n, d = mat.shape
    metadata = embedding.metadata_tsv(desc.text, data.get("labels"), opts.get("metadata_header"), n)
    sprite = embedding.sprite_png(data["images"], n) if data.get("images") is not None else None
    raw = embedding.tensor_bytes(mat) if tensor_format == "bytes" else None

    logdir = out.run_dir(run)
    name = tensor_name(desc.tag, desc.step)
    step_dir, tag_dir = f"{desc.step:05d}", tag_dir_name(desc.tag)
    rel_dir = posixpath.join(step_dir, tag_dir)
    abs_dir = os.path.join(logdir, step_dir, tag_dir)
    config_path = os.path.join(logdir, CONFIG_NAME)
    out.makedirs(logdir)
    with out.lock(logdir):
        out.check_inside(logdir, abs_dir)
        config = _read_config(out, config_path)  # refuse a broken config before writing anything
        at = _remove_ours(config, name, rel_dir)
        if at is not None:
            _write_config(out, config_path, config)  # unname the files about to be replaced

        out.makedirs(abs_dir)
        written: list[str] = []
        tensors = TENSORS_TSV if raw is None else TENSORS_BYTES
        if raw is None:
            written.append(out.write_file(abs_dir, tensors, embedding.tsv_chunks(mat)))
        else:
            written.append(out.write_file(abs_dir, tensors, [raw]))
        if metadata is not None:
            written.append(out.write_file(abs_dir, METADATA_TSV, [metadata]))
        if sprite is not None:
            written.append(out.write_file(abs_dir, SPRITE_PNG, [sprite[0]]))
        for stale in _DATA_FILES:  # a previous call's files this call did not replace
            path = os.path.join(abs_dir, stale)
            if path not in written:
                out.remove(path)
        for path in (abs_dir, os.path.dirname(abs_dir), logdir):
            out.sync_dir(path)  # the new entries must be durable before the config names them

        entry = projector_config_pb2.EmbeddingInfo(tensor_name=name)
        entry.tensor_path = posixpath.join(rel_dir, tensors)
        entry.tensor_shape.extend([n, d])
        if metadata is not None:
            entry.metadata_path = posixpath.join(rel_dir, METADATA_TSV)
        if sprite is not None:
            entry.sprite.image_path = posixpath.join(rel_dir, SPRITE_PNG)
            entry.sprite.single_image_dim.extend(sprite[1])

        # Read again: another writer (mxboard appends) may have added entries since.
        config = _read_config(out, config_path)
        again = _remove_ours(config, name, rel_dir)
        _write_config(out, config_path, _inserted(config, entry, at if at is not None else again))
    written.append(config_path)
    return written


# -- config ---------------------------------------------------------------------


def _read_config(out: LocalDirectory, path: str) -> projector_config_pb2.ProjectorConfig:
    config = projector_config_pb2.ProjectorConfig()
    try:
        text = out.read_text(path)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc}); left as it is, embedding not written") from None
    if text is None:
        return config
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


def _write_config(out: LocalDirectory, path: str, config: projector_config_pb2.ProjectorConfig) -> None:
    directory = os.path.dirname(path) or "."
    out.write_file(directory, os.path.basename(path), [text_format.MessageToString(config).encode("utf-8")])
    out.sync_dir(directory)
