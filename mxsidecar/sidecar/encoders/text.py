"""Text: the ``text`` plugin, rendered as Markdown.

Contract (TensorBoard ``plugins/text/metadata.py``): plugin ``text``, content a
``TextPluginData{version: 0}``, value a DT_STRING tensor of UTF-8 bytes.  The value
carries the tag in ``tag`` (not ``node_name``): mxboard's ``node_name`` is why its
text never shows (mxboard#24), since TensorBoard keys plugin metadata by ``tag``.
"""

from __future__ import annotations

from typing import Any

from ...formats.proto import plugin_text_pb2, summary_pb2, tensor_pb2, types_pb2
from ...wire.descriptors import Descriptor
from . import Encoded

PLUGIN_NAME = "text"
PROTO_VERSION = 0


def create_summary_metadata() -> summary_pb2.SummaryMetadata:
    content = plugin_text_pb2.TextPluginData(version=PROTO_VERSION)
    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_TENSOR)
    md.plugin_data.plugin_name = PLUGIN_NAME
    md.plugin_data.content = content.SerializeToString()
    return md


METADATA = create_summary_metadata()


def text_pb(tag: str, text: str) -> summary_pb2.Summary.Value:
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode("utf-8")])
    tensor.tensor_shape.SetInParent()  # rank 0: one Markdown document
    return summary_pb2.Summary.Value(tag=tag, tensor=tensor)


def encode(desc: Descriptor, data: Any = None) -> list[Encoded]:
    return [Encoded(desc.run, text_pb(desc.tag, desc.text), METADATA)]
