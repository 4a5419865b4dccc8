"""Graphs: an MXNet symbol's JSON as a TensorBoard ``GraphDef``.

Contract (TensorBoard ``plugins/graph``, ``dataclass_compat.py``): the serialized
``GraphDef`` goes in ``Event.graph_def``; TensorBoard turns it into a blob of the
``graphs`` plugin under tag ``__run_graph__`` when it loads the file (the metadata of
:func:`create_summary_metadata`, which the writer never writes) and keeps the newest
graph of a run.  The server only trims large attributes; the browser parses the
graph's text form and reads nothing but ``node``: ``name`` ('/' makes scopes),
``op``, ``input`` (``"name"`` for output 0, ``"name:k"`` for output k), ``device``
and ``attr``, where ``_output_shapes`` (a list of shapes, one per output; -1 shows
as '?') labels the edges.  ``versions`` is never read, so it is left unset: an
MXNet graph has no TensorFlow producer version to claim.

Mapping of ``sym.tojson()`` (``{"nodes": [{"op", "name", "attrs", "inputs":
[[node_id, output_index, version], ...]}], "arg_nodes", "heads"}``):

- every node becomes one NodeDef of op ``node["op"]``; variables (op ``"null"``) get
  op ``Variable``, MXNet's own name for them (``mx.sym.Variable``), as "null" reads
  as missing data in TensorBoard's info card;
- each attribute is its own string attr (mxboard packs them into one JSON string), with
  ``"`` written as ``'`` and ``\\`` as ``/``: TensorBoard serves the graph to the browser
  as ``str(graph)``, and protobuf 5.26-6.30's C implementation (upb) prints bytes fields
  without escaping either, so a graph holding ``["zero", {}]`` (every BatchNorm's
  ``__init__``) would reach the browser as text it cannot parse; with protobuf's other
  versions the browser would show the escapes (``[\\"zero\\", {}]``) anyway;
- ``shapes`` become ``_output_shapes``.  A key is a node's name (``[dims]``, or
  ``[[dims], ...]`` one per output) or an output's name as ``list_outputs()`` of the
  symbol's internals gives it: ``<node>_output`` for output 0 of a one-output node,
  ``<node>_output<k>`` for output k.  An output without a shape gets an unknown-rank
  one, which TensorBoard leaves unlabeled; named extra outputs (BatchNorm's
  ``bn0_mean``) cannot be told apart from variables and are ignored;
- a name used twice gets a ``_1``, ``_2``... suffix, since TensorBoard would merge
  the nodes.

Parameters go inside their operator's scope, so a collapsed ``conv0`` carries its
weights (TensorBoard shows the operator itself as ``conv0/(conv0)``).  The rule: a
variable is a parameter of operator X, named ``X/<variable name>``, when

1. X is the only node that consumes it (shared weights stay at the top level), and
2. its name starts with X's block prefix and ``_``: the operator's name without a
   trailing ``_fwd`` (``conv0`` -> ``conv0_weight``, ``bn0_moving_mean``; Gluon's
   ``dense0_fwd`` -> ``dense0_weight``), and
3. its name does not end in ``_label``: loss operators create ``<op>_label``
   variables, but the data iterator feeds them.

So ``data`` and user-named inputs stay at the top level however many ops read them.
"""

from __future__ import annotations

import json
import re
import typing
from typing import Any

from ...formats.proto import graph_pb2, summary_pb2, tensor_shape_pb2
from ...wire.descriptors import Descriptor

PLUGIN_NAME = "graphs"
PROTO_VERSION = 0  # the graphs plugin has no content proto; nothing is versioned
RUN_GRAPH_NAME = "__run_graph__"
VARIABLE_OP = "Variable"
# See the module docstring: the characters some protobuf releases print unescaped.
_UNQUOTED = str.maketrans({'"': "'", "\\": "/"})

Shapes = typing.Mapping[str, typing.Sequence[Any]]  # a run-time alias: collections.abc generics are 3.9+


def create_summary_metadata() -> summary_pb2.SummaryMetadata:
    """The metadata TensorBoard gives an ``Event.graph_def`` when it loads one."""
    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_BLOB_SEQUENCE)
    md.plugin_data.plugin_name = PLUGIN_NAME
    return md


def _block_prefix(op_name: str) -> str:
    return (op_name[: -len("_fwd")] if op_name.endswith("_fwd") else op_name) + "_"


def _owners(nodes: list[dict[str, Any]], inputs: list[list[int]]) -> dict[int, int]:
    """variable id -> id of the operator it is a parameter of (see the module's rule)."""
    consumers: dict[int, set[int]] = {}
    for i, srcs in enumerate(inputs):
        for src in srcs:
            consumers.setdefault(src, set()).add(i)
    owners = {}
    for i, node in enumerate(nodes):
        users = consumers.get(i, set())
        if node["op"] != "null" or len(users) != 1:
            continue
        (user,) = users
        name = node["name"]
        if name.startswith(_block_prefix(nodes[user]["name"])) and not name.endswith("_label"):
            owners[i] = user
    return owners


def _shape_list(name: str, dims: Any) -> list[list[int]]:
    def is_dims(x: Any) -> bool:
        return isinstance(x, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in x)

    if is_dims(dims):
        return [list(dims)]
    if isinstance(dims, (list, tuple)) and dims and all(is_dims(s) for s in dims):
        return [list(s) for s in dims]
    raise ValueError(f"shape of {name!r} must be a list of ints or a list of them per output, not {dims!r}")


_OUTPUT_KEY = re.compile(r"(.+)_output(\d*)")


def _shapes_by_node(shapes: Shapes, names: set[str]) -> dict[str, list[list[int] | None]]:
    """node name -> shape of each output (None: unknown), from ``shapes``' keys."""
    out: dict[str, list[list[int] | None]] = {}
    for key, dims in shapes.items():
        if key in names:
            out[key] = list(_shape_list(key, dims))
    for key, dims in shapes.items():
        m = _OUTPUT_KEY.fullmatch(key)
        if key in names or m is None or m[1] not in names or m[1] in shapes:
            continue
        index = int(m[2] or 0)
        per_output = out.setdefault(m[1], [])
        per_output.extend([None] * (index + 1 - len(per_output)))
        per_output[index] = _shape_list(key, dims)[0]
    return out


def _check_nodes(conf: Any) -> list[dict[str, Any]]:
    nodes = conf.get("nodes") if isinstance(conf, dict) else None
    if not isinstance(nodes, list) or not nodes:
        raise ValueError("not an MXNet symbol's JSON: no 'nodes' list")
    for i, node in enumerate(nodes):
        if not (isinstance(node, dict) and isinstance(node.get("op"), str) and isinstance(node.get("name"), str)):
            raise ValueError(f"node {i} of the symbol's JSON has no 'op' and 'name'")
    return nodes


def _input_ids(nodes: list[dict[str, Any]]) -> list[list[int]]:
    out = []
    for node in nodes:
        srcs = []
        for entry in node.get("inputs", []):
            if not (isinstance(entry, list) and len(entry) >= 2 and 0 <= entry[0] < len(nodes)):
                raise ValueError(f"node {node['name']!r} has an input {entry!r} naming no node")
            srcs.append(int(entry[0]))
        out.append(srcs)
    return out


def graph_pb(symbol_json: str, shapes: Shapes | None = None) -> graph_pb2.GraphDef:
    """The GraphDef of ``sym.tojson()``; ValueError if it is not a symbol's JSON."""
    try:
        conf = json.loads(symbol_json)
    except ValueError as e:
        raise ValueError(f"not an MXNet symbol's JSON: {e}") from None
    nodes = _check_nodes(conf)
    input_ids = _input_ids(nodes)
    owners = _owners(nodes, input_ids)
    node_shapes = _shapes_by_node(shapes or {}, {node["name"] for node in nodes})

    names: list[str] = []
    used: set[str] = set()
    for i, node in enumerate(nodes):
        name = node["name"]
        if i in owners:
            name = f"{nodes[owners[i]]['name']}/{name}"
        unique, k = name, 0
        while unique in used:
            k += 1
            unique = f"{name}_{k}"
        used.add(unique)
        names.append(unique)

    graph = graph_pb2.GraphDef()
    for i, node in enumerate(nodes):
        nd = graph.node.add(name=names[i], op=VARIABLE_OP if node["op"] == "null" else node["op"])
        for entry in node.get("inputs", []):
            src, index = int(entry[0]), int(entry[1])
            nd.input.append(names[src] if index == 0 else f"{names[src]}:{index}")
        # MXNet before 0.12 wrote 'param' (operator arguments) and 'attr' (user attributes)
        attrs = {**node.get("param", {}), **node.get("attr", {}), **node.get("attrs", {})}
        for key, value in attrs.items():
            text = value if isinstance(value, str) else json.dumps(value)
            nd.attr[key].s = text.translate(_UNQUOTED).encode()
        if node["name"] in node_shapes:
            out_shapes = nd.attr["_output_shapes"].list.shape
            for shape in node_shapes[node["name"]]:
                proto = out_shapes.add()
                if shape is None:
                    proto.unknown_rank = True
                else:
                    proto.dim.extend(tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in shape)
    return graph


def encode_graph(desc: Descriptor) -> bytes:
    """Serialized ``GraphDef`` of ``desc.text``, for ``Event.graph_def``."""
    try:
        graph = graph_pb(desc.text, (desc.options or {}).get("shapes"))
    except TypeError as e:  # the sidecar refuses an item on ValueError; anything else is a bug of ours
        raise ValueError(str(e)) from e
    return graph.SerializeToString()
