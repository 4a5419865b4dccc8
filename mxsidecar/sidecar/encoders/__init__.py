"""One module per summary kind, each opening with its TensorBoard contract
(``PLUGIN_NAME``, ``PROTO_VERSION``, ``create_summary_metadata()``) followed by a pure
array -> ``Summary.Value`` function, and ``encode(descriptor, array)`` that returns
:class:`Encoded` values.

Values come without metadata; the sidecar attaches ``Encoded.metadata`` to a tag's
first value in each file only (TensorBoard keeps just that one), so the metadata of
the common case is built once per kind, not once per value.

:func:`encoder_for` maps a descriptor's kind to its module lazily, so the sidecar pays
for Pillow or wave only when an image or audio value arrives.  Only the sidecar
imports this package.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable, List, NamedTuple

from ...formats.proto import summary_pb2
from ...wire.descriptors import Kind

__all__ = ["EncodeFn", "Encoded", "encoder_for"]


class Encoded(NamedTuple):
    run: str  # sub-directory of the logdir ('' is the writer's own run)
    value: summary_pb2.Summary.Value
    metadata: summary_pb2.SummaryMetadata | None  # None: legacy image/audio, TensorBoard makes its own
    counts: dict[str, int] | None = None  # e.g. {"nonfinite": n}: reported per tag in stats()


# encode(descriptor, array or None) -> [Encoded, ...]
EncodeFn = Callable[..., List[Encoded]]  # typing.List: a run-time alias, and list[...] is 3.9+

_MODULES = {
    Kind.SCALAR: "scalar",
    Kind.TEXT: "text",
    Kind.HISTOGRAM: "histogram",
    Kind.IMAGE: "image",
    Kind.AUDIO: "audio",
    Kind.VIDEO: "video",
    Kind.PR_CURVE: "pr_curve",
    Kind.HPARAMS: "hparams",
    Kind.CUSTOM_SCALARS: "custom_scalars",
}

_loaded: dict[int, ModuleType] = {}


def encoder_for(kind: int) -> EncodeFn:
    """The ``encode`` function of ``kind``'s module; KeyError for a kind with none."""
    mod = _loaded.get(kind)
    if mod is None:
        mod = importlib.import_module(f"{__name__}.{_MODULES[Kind(kind)]}")
        _loaded[kind] = mod
    fn: EncodeFn = mod.encode
    return fn
