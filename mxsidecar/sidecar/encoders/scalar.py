"""Scalars: the ``scalars`` plugin's tensor form.

Contract (TensorBoard ``plugins/scalar/metadata.py``): plugin ``scalars``, content a
``ScalarPluginData{version: 0}``, data class SCALAR, value a rank-0 float tensor.
The value is DT_FLOAT: TensorBoard's Rust data server (the default loader,
``--load_fast``) silently drops DT_DOUBLE scalars, which its Python loader accepts;
measured with tensorboard 2.21 / tensorboard-data-server 0.7.2.
"""

from __future__ import annotations

import struct
from typing import Any

from ...formats.proto import plugin_scalar_pb2, summary_pb2, types_pb2
from ...wire.descriptors import Descriptor
from . import Encoded

PLUGIN_NAME = "scalars"
PROTO_VERSION = 0


def create_summary_metadata() -> summary_pb2.SummaryMetadata:
    content = plugin_scalar_pb2.ScalarPluginData(version=PROTO_VERSION)
    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_SCALAR)
    md.plugin_data.plugin_name = PLUGIN_NAME
    md.plugin_data.content = content.SerializeToString()
    return md


METADATA = create_summary_metadata()


def scalar_pb(tag: str, value: float) -> summary_pb2.Summary.Value:
    # Filled in place: building a TensorProto and passing it in copies it (~2x slower).
    v = summary_pb2.Summary.Value(tag=tag)
    v.tensor.dtype = types_pb2.DT_FLOAT
    v.tensor.float_val.append(value)
    v.tensor.tensor_shape.SetInParent()  # rank 0
    return v


# -- the bytes of a whole scalar Event, without protobuf ---------------------------------
#
# The sidecar writes scalars far more often than anything else, and building three
# protobuf objects per value costs 2-3 us with the C runtimes and ~80 us with the
# pure-Python one (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, or a platform with no
# wheel).  A scalar event is a handful of fields, so it is written as bytes directly,
# in the field order protobuf itself uses: the output is byte-identical to
# ``Event(...).SerializeToString()`` (tests/test_kinds.py checks it against our
# classes and reads it back with TensorBoard's).
#
#   Event        1: wall_time (double)  2: step (int64)  5: summary
#   Summary      1: value
#   Value        1: tag  8: tensor  9: metadata (a tag's first value in a file only)
#   TensorProto  1: dtype = DT_FLOAT  2: tensor_shape = {} (rank 0)  5: float_val, packed

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_TENSOR_HEAD = b"\x42\x0a\x08\x01\x12\x00\x2a\x04"  # Value.tensor, 10 bytes: dtype, shape, float_val
_METADATA_FIELD = b""  # Value.metadata with its length prefix, set below
_INF, _NINF = _FLOAT.pack(float("inf")), _FLOAT.pack(float("-inf"))


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes([i]) for i in range(0x80)]
_tag_fields: dict[str, bytes] = {}  # tag -> Value.tag field + tensor head: a run has few tags


def _float32(value: float) -> bytes:
    try:
        return _FLOAT.pack(value)
    except OverflowError:  # beyond float32: protobuf stores an infinity, and so do we
        return _INF if value > 0 else _NINF


def event_bytes(wall_time: float, step: int, tag: str, value: float, with_metadata: bool) -> bytes:
    """The serialized ``Event`` of one scalar, as protobuf would write it."""
    head = _tag_fields.get(tag)
    if head is None:
        tag_b = tag.encode()
        head = (b"\x0a" + _varint(len(tag_b)) + tag_b if tag_b else b"") + _TENSOR_HEAD
        if len(_tag_fields) < 100_000:  # bounded: a run logging endless new tags still works
            _tag_fields[tag] = head
    body = head + _float32(value) + _METADATA_FIELD if with_metadata else head + _float32(value)
    n = len(body)
    summary = b"\x0a" + _varint(n) + body
    out = b"\x09" + _DOUBLE.pack(wall_time) if wall_time != 0.0 else b""
    if step:
        out += b"\x10" + _varint(step)
    return out + b"\x2a" + _varint(n + 1 + len(_varint(n))) + summary


_md = METADATA.SerializeToString()
_METADATA_FIELD = b"\x4a" + _varint(len(_md)) + _md
del _md


def encode(desc: Descriptor, data: Any = None) -> list[Encoded]:
    """A scalar arrives inside its descriptor (``number``) or as a 1-element array."""
    value = desc.number if data is None else float(data.reshape(-1)[0])
    return [Encoded(desc.run, scalar_pb(desc.tag, value), METADATA)]
