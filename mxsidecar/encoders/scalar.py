"""Scalars: the ``scalars`` plugin's tensor form.

Contract (TensorBoard ``plugins/scalar/metadata.py``): plugin ``scalars``, content a
``ScalarPluginData{version: 0}``, data class SCALAR, value a rank-0 float tensor.
The value is DT_FLOAT: TensorBoard's Rust data server (the default loader,
``--load_fast``) silently drops DT_DOUBLE scalars, which its Python loader accepts;
measured with tensorboard 2.21 / tensorboard-data-server 0.7.2.
"""

from __future__ import annotations

from typing import Any

from ..messages import Descriptor
from ..proto import plugin_scalar_pb2, summary_pb2, types_pb2
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


def encode(desc: Descriptor, data: Any = None) -> list[Encoded]:
    """A scalar arrives inside its descriptor (``number``) or as a 1-element array."""
    value = desc.number if data is None else float(data.reshape(-1)[0])
    return [Encoded(desc.run, scalar_pb(desc.tag, value), METADATA)]
