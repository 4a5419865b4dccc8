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
    # Steps run to the millions: the lengths a step takes are unrolled (a loop over a
    # bytearray costs the sidecar about a microsecond per scalar).
    if n < 0x80:
        return _SMALL[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    if n < 0x10000000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14 & 0x7F | 0x80, n >> 21))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes([i]) for i in range(0x80)]
_STEP_SMALL = [bytes([0x10, i]) for i in range(0x80)]
_tag_fields: dict[str, bytes] = {}  # tag -> Value.tag field + tensor head: a run has few tags


def float32_bytes(value: float) -> bytes:
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
    body = head + float32_bytes(value) + _METADATA_FIELD if with_metadata else head + float32_bytes(value)
    n = len(body)
    summary = b"\x0a" + _varint(n) + body
    out = b"\x09" + _DOUBLE.pack(wall_time) if wall_time != 0.0 else b""
    if step:
        out += b"\x10" + _varint(step)
    return out + b"\x2a" + _varint(n + 1 + len(_varint(n))) + summary


# The scalar fast path (``sidecar/batch.py``) builds an event from two cached parts:
#   [wall_time field][step field] + summary_prefix(tag) + float32 value
# (a tag's first value in a file, which carries the metadata, goes through event_bytes).
WALL_TIME_FIELD = struct.Struct("<Bd")  # (0x09, wall_time): Event field 1, a double
_prefixes: dict[bytes, bytes] = {}


def step_field(step: int) -> bytes:
    """Event field 2 (step, a varint), for a step > 0 (protobuf omits a zero step)."""
    if step < 0x80:
        return _STEP_SMALL[step]
    if step < 0x4000:
        return bytes((0x10, step & 0x7F | 0x80, step >> 7))
    if step < 0x200000:
        return bytes((0x10, step & 0x7F | 0x80, step >> 7 & 0x7F | 0x80, step >> 14))
    return b"\x10" + _varint(step)


def summary_prefix(tag_b: bytes) -> bytes:
    """Event field 5 (summary) of a scalar without metadata, all but its 4 value bytes."""
    pre = _prefixes.get(tag_b)
    if pre is None:
        head = (b"\x0a" + _varint(len(tag_b)) + tag_b if tag_b else b"") + _TENSOR_HEAD
        n = len(head) + 4  # the Value: its tag and tensor, the float included
        pre = b"\x2a" + _varint(n + 1 + len(_varint(n))) + b"\x0a" + _varint(n) + head
        if len(_prefixes) < 100_000:  # bounded, as _tag_fields
            _prefixes[tag_b] = pre
    return pre


_md = METADATA.SerializeToString()
_METADATA_FIELD = b"\x4a" + _varint(len(_md)) + _md
del _md


def encode(desc: Descriptor, data: Any = None) -> list[Encoded]:
    """A scalar arrives inside its descriptor (``number``) or as a 1-element array."""
    value = desc.number if data is None else float(data.reshape(-1)[0])
    return [Encoded(desc.run, scalar_pb(desc.tag, value), METADATA)]
