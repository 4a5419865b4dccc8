"""mxsidecar.formats.proto must stay wire-compatible with TensorBoard's own messages.

TensorBoard reads our event files with its own generated classes, so the only
contract is the wire format (plus field names, for the text-format projector
config). The installed tensorboard package is the reference: its descriptors
are compared with ours, and messages are round-tripped in both directions.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Union, cast

import pytest
import tensorboard
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message_factory,
    struct_pb2,
    text_format,
)
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from tensorboard.compat.proto import event_pb2 as tb_event_pb2
from tensorboard.compat.proto import graph_pb2 as tb_graph_pb2
from tensorboard.compat.proto import summary_pb2 as tb_summary_pb2
from tensorboard.compat.proto import types_pb2 as tb_types_pb2
from tensorboard.plugins.hparams import api_pb2 as tb_hparams_api_pb2
from tensorboard.plugins.hparams import plugin_data_pb2 as tb_hparams_pb2
from tensorboard.plugins.pr_curve import plugin_data_pb2 as tb_pr_curve_pb2
from tensorboard.plugins.projector import projector_config_pb2 as tb_projector_pb2

from mxsidecar.formats.proto import _runtime

REPO_ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = REPO_ROOT / "mxsidecar" / "formats" / "proto"

# Our proto module -> (tensorboard modules holding the counterparts, the proto
# package those counterparts live in).
_TB = "tensorboard.compat.proto."
COUNTERPARTS: dict[str, tuple[tuple[str, ...], str]] = {
    "types": ((_TB + "types_pb2",), "tensorboard"),
    "resource_handle": ((_TB + "resource_handle_pb2",), "tensorboard"),
    "tensor_shape": ((_TB + "tensor_shape_pb2",), "tensorboard"),
    "tensor": ((_TB + "tensor_pb2",), "tensorboard"),
    "histogram": ((_TB + "histogram_pb2",), "tensorboard"),
    "summary": ((_TB + "summary_pb2",), "tensorboard"),
    "event": ((_TB + "event_pb2",), "tensorboard"),
    "versions": ((_TB + "versions_pb2",), "tensorboard"),
    "attr_value": ((_TB + "attr_value_pb2",), "tensorboard"),
    "node_def": ((_TB + "node_def_pb2",), "tensorboard"),
    "graph": ((_TB + "graph_pb2",), "tensorboard"),
    "plugin_scalar": (("tensorboard.plugins.scalar.plugin_data_pb2",), "tensorboard"),
    "plugin_text": (("tensorboard.plugins.text.plugin_data_pb2",), "tensorboard"),
    "plugin_histogram": (
        ("tensorboard.plugins.histogram.plugin_data_pb2",),
        "tensorboard",
    ),
    "plugin_image": (("tensorboard.plugins.image.plugin_data_pb2",), "tensorboard"),
    "plugin_audio": (("tensorboard.plugins.audio.plugin_data_pb2",), "tensorboard"),
    "plugin_pr_curve": (
        ("tensorboard.plugins.pr_curve.plugin_data_pb2",),
        "tensorboard",
    ),
    "plugin_hparams": (
        (
            "tensorboard.plugins.hparams.api_pb2",
            "tensorboard.plugins.hparams.plugin_data_pb2",
        ),
        "tensorboard.hparams",
    ),
    "plugin_custom_scalar": (
        ("tensorboard.plugins.custom_scalar.layout_pb2",),
        "tensorboard",
    ),
    "projector_config": (
        ("tensorboard.plugins.projector.projector_config_pb2",),
        "tensorboard.projector",
    ),
}

# Upstream fields we leave out on purpose (keyed by upstream message). Each
# must be reserved in our .proto so its number cannot be reused.
OMITTED_FIELDS: dict[str, set[str]] = {
    "tensorboard.NodeDef": {"experimental_type"},
    "tensorboard.GraphDef": {"library", "debug_info"},
}

# Our .proto files copy TensorBoard 2.21's.  An older TensorBoard (2.13 is the newest
# for Python 3.8) must know a subset: every field and enum value it has, we have with
# the same number and type; what it lacks it skips on the wire (proto3 unknown fields).
# With TensorBoard 2.21 itself the match must be exact.
REFERENCE_TENSORBOARD = (2, 21)
OLDER_TENSORBOARD = tuple(int(x) for x in tensorboard.__version__.split(".")[:2]) < REFERENCE_TENSORBOARD

AnyDescriptor = Union[Descriptor, EnumDescriptor]


def _proto_stems() -> list[str]:
    return sorted(p.stem for p in PROTO_DIR.glob("*.proto"))


def _ours(stem: str) -> ModuleType:
    return importlib.import_module(f"mxsidecar.formats.proto.{stem}_pb2")


def _walk(desc: Descriptor) -> Iterator[AnyDescriptor]:
    yield desc
    yield from desc.enum_types
    for nested in desc.nested_types:
        yield from _walk(nested)


def _our_types() -> Iterator[AnyDescriptor]:
    for stem in _proto_stems():
        file = _ours(stem).DESCRIPTOR
        yield from file.enum_types_by_name.values()
        for msg in file.message_types_by_name.values():
            yield from _walk(msg)


def _counterpart(ours: AnyDescriptor) -> AnyDescriptor:
    """TensorBoard's descriptor for `ours`: same name, relative to the package."""
    file = ours.file
    if not file.name.startswith("mxsidecar/"):
        return ours  # well-known types such as google.protobuf.Value are shared
    tb_modules, tb_package = COUNTERPARTS[Path(file.name).stem]
    tb_files = {importlib.import_module(m).DESCRIPTOR.name for m in tb_modules}
    name = tb_package + ours.full_name[len(file.package) :]
    pool = descriptor_pool.Default()
    try:
        if isinstance(ours, EnumDescriptor):
            found: AnyDescriptor = pool.FindEnumTypeByName(name)
        else:
            found = pool.FindMessageTypeByName(name)
    except KeyError:
        raise AssertionError(f"{ours.full_name}: tensorboard has no {name}") from None
    assert found.file.name in tb_files, f"{name} found in unexpected {found.file.name}"
    return found


def _message_proto(desc: Descriptor) -> descriptor_pb2.DescriptorProto:
    # From the file's serialized form: Descriptor.CopyToProto needs offsets that pure-Python
    # protobuf 3.20 does not keep for descriptors added to a pool ("Descriptor does not
    # contain serialization"), while FileDescriptor.CopyToProto works on every version.
    file = descriptor_pb2.FileDescriptorProto()
    desc.file.CopyToProto(file)
    path = desc.full_name[len(file.package) + 1 :].split(".") if file.package else desc.full_name.split(".")
    messages = file.message_type
    for part in path:
        found = next(m for m in messages if m.name == part)
        messages = found.nested_type
    return found


def _field_proto(field: FieldDescriptor) -> descriptor_pb2.FieldDescriptorProto:
    # FieldDescriptor.label is gone in protobuf 7; the proto form has it everywhere.
    msg = _message_proto(field.containing_type)
    return next(f for f in msg.field if f.number == field.number)


def _reserved(desc: Descriptor) -> tuple[set[int], set[str]]:
    msg = _message_proto(desc)
    numbers = {n for r in msg.reserved_range for n in range(r.start, r.end)}
    return numbers, set(msg.reserved_name)


OUR_MESSAGES = [d for d in _our_types() if isinstance(d, Descriptor)]
OUR_ENUMS = [d for d in _our_types() if isinstance(d, EnumDescriptor)]


# --- Descriptor comparison -------------------------------------------------


def test_every_proto_is_generated_and_mapped() -> None:
    generated = sorted(p.name[: -len("_pb2.py")] for p in PROTO_DIR.glob("*_pb2.py"))
    stubs = sorted(p.name[: -len("_pb2.pyi")] for p in PROTO_DIR.glob("*_pb2.pyi"))
    assert _proto_stems() == generated == stubs
    assert sorted(COUNTERPARTS) == _proto_stems()


@pytest.mark.parametrize("stem", _proto_stems())
def test_proto_package_is_ours(stem: str) -> None:
    file = _ours(stem).DESCRIPTOR
    assert file.name == f"mxsidecar/formats/proto/{stem}.proto"
    assert file.package == "mxsidecar.tb" or file.package.startswith("mxsidecar.tb.")


@pytest.mark.parametrize("stem", _proto_stems())
def test_module_is_a_descriptor_built_in_our_pool(stem: str) -> None:
    """No protoc gencode (it would pin the runtime's version), and every message and
    enum the .proto declares is in the module's descriptor, in our private pool."""
    source = (PROTO_DIR / f"{stem}_pb2.py").read_text()
    assert "runtime_version" not in source and "_builder" not in source
    assert "_runtime import load" in source
    file = _ours(stem).DESCRIPTOR
    assert file.pool is _runtime.POOL
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindFileByName(file.name)
    declared = re.findall(r"^\s*(?:message|enum)\s+(\w+)", (PROTO_DIR / f"{stem}.proto").read_text(), re.M)
    built: list[str] = list(file.enum_types_by_name)
    stack = list(file.message_types_by_name.values())
    while stack:
        msg = stack.pop()
        if msg.GetOptions().map_entry:
            continue  # map<k, v> fields' synthetic entry messages
        built.append(msg.name)
        built.extend(e.name for e in msg.enum_types)
        stack.extend(msg.nested_types)
    assert set(declared) == set(built)


def test_unusable_runtime_is_one_clear_error() -> None:
    with pytest.raises(_runtime.ProtobufUnsupported, match=r"protobuf \S+ \(\w+ implementation\).*pip install"):
        _runtime.load(
            descriptor_pb2.FileDescriptorProto(name="x.proto", dependency=["no/such.proto"]).SerializeToString(), {}
        )


@pytest.mark.parametrize("ours", OUR_MESSAGES, ids=lambda d: d.full_name)
def test_message_fields_match_tensorboard(ours: Descriptor) -> None:
    theirs = _counterpart(ours)
    assert isinstance(theirs, Descriptor)
    assert ours.name == theirs.name
    assert ours.GetOptions().map_entry == theirs.GetOptions().map_entry

    for field in ours.fields:
        if OLDER_TENSORBOARD and field.name not in theirs.fields_by_name:
            continue  # added upstream after this TensorBoard: unknown to it, skipped on the wire
        assert field.name in theirs.fields_by_name, f"{field.full_name} unknown upstream"
        other = theirs.fields_by_name[field.name]
        where = field.full_name
        assert field.number == other.number, where
        assert field.type == other.type, where
        assert _field_proto(field).label == _field_proto(other).label, where
        if hasattr(field, "is_packed"):  # 4.x+; both files are proto3, so packing follows from the type
            assert field.is_packed == other.is_packed, where
        ours_oneof = field.containing_oneof.name if field.containing_oneof else None
        theirs_oneof = other.containing_oneof.name if other.containing_oneof else None
        assert ours_oneof == theirs_oneof, where
        for ref, other_ref in (
            (field.message_type, other.message_type),
            (field.enum_type, other.enum_type),
        ):
            assert (ref is None) == (other_ref is None), where
            if ref is not None and other_ref is not None:
                assert ref.name == other_ref.name, where
                assert _counterpart(ref).full_name == other_ref.full_name, where

    omitted = set(theirs.fields_by_name) - set(ours.fields_by_name)
    assert omitted == OMITTED_FIELDS.get(theirs.full_name, set())
    reserved_numbers, reserved_names = _reserved(ours)
    for name in omitted:
        assert theirs.fields_by_name[name].number in reserved_numbers, name
        assert name in reserved_names, name


def test_omissions_refer_to_real_messages() -> None:
    # A stale entry (e.g. a renamed message) would silently stop being checked.
    checked = {_counterpart(d).full_name for d in OUR_MESSAGES}
    assert set(OMITTED_FIELDS) <= checked


@pytest.mark.parametrize("ours", OUR_ENUMS, ids=lambda d: d.full_name)
def test_enum_values_match_tensorboard(ours: EnumDescriptor) -> None:
    theirs = _counterpart(ours)
    assert isinstance(theirs, EnumDescriptor)
    assert ours.name == theirs.name
    assert set(theirs.values_by_name) <= set(ours.values_by_name)
    for value in ours.values:
        if OLDER_TENSORBOARD and value.name not in theirs.values_by_name:
            assert value.number not in theirs.values_by_number, value.name  # no clash
            continue
        assert value.name in theirs.values_by_name, f"{ours.full_name}.{value.name}"
        assert value.number == theirs.values_by_name[value.name].number, value.name


# --- Wire round trips ------------------------------------------------------


def _dict(msg: Message) -> dict[str, Any]:
    return cast("dict[str, Any]", json_format.MessageToDict(msg, preserving_proto_field_name=True))


def _tb_class(ours: Descriptor) -> type[Message]:
    theirs = _counterpart(ours)
    assert isinstance(theirs, Descriptor)
    return cast("type[Message]", _class_of(theirs))


def _class_of(desc: Descriptor) -> Any:
    """The message class of a descriptor in any pool, on every supported runtime:
    ``GetMessageClass`` from protobuf 4.21.x on, ``MessageFactory.GetPrototype`` before."""
    if desc.file.pool is _runtime.POOL:
        return _runtime.message_class(desc)
    get = getattr(message_factory, "GetMessageClass", None)
    if get is not None:
        return get(desc)
    return message_factory.MessageFactory(desc.file.pool).GetPrototype(desc)


def _is_repeated(field: FieldDescriptor) -> bool:
    # FieldDescriptor.is_repeated is 4.x+; .label is gone in 7.x.
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _our_class(stem: str, name: str) -> type[Message]:
    cls = getattr(_ours(stem), name)
    assert isinstance(cls, type)
    assert issubclass(cls, Message)
    return cls


def _scalar(field: FieldDescriptor, *, alt: bool = False) -> Any:
    """A non-default value of the field's type (so proto3 serializes it)."""
    if field.enum_type is not None:
        # Early values: every TensorBoard since 2.13 has them (later ones add dtypes).
        values = field.enum_type.values
        return values[2 if alt and len(values) > 2 else min(1, len(values) - 1)].number
    t = FieldDescriptor
    if field.type == t.TYPE_STRING:
        return "b" if alt else "a"
    if field.type == t.TYPE_BYTES:
        return b"\x00\xff" if alt else b"\x80"
    if field.type == t.TYPE_BOOL:
        return True
    if field.type in (t.TYPE_FLOAT, t.TYPE_DOUBLE):
        return -2.5 if alt else 1.5  # exact in float32, so no rounding noise
    if field.type in (t.TYPE_UINT32, t.TYPE_UINT64, t.TYPE_FIXED32, t.TYPE_FIXED64):
        return 3 if alt else 300
    return -3 if alt else 300


def _touch(msg: Message) -> None:
    """Make a submessage present and set its first singular scalar field."""
    msg.SetInParent()
    for field in msg.DESCRIPTOR.fields:
        if field.message_type is None and not _is_repeated(field):
            setattr(msg, field.name, _scalar(field))
            return


def _set_one_field(msg: Message, field: FieldDescriptor) -> None:
    entry = field.message_type
    if entry is None and not _is_repeated(field):
        setattr(msg, field.name, _scalar(field))
        return
    target: Any = getattr(msg, field.name)
    if entry is not None and entry.GetOptions().map_entry:
        key = _scalar(entry.fields_by_name["key"])
        value_field = entry.fields_by_name["value"]
        if value_field.message_type is not None:
            _touch(target[key])
        else:
            target[key] = _scalar(value_field)
    elif _is_repeated(field) and entry is not None:
        _touch(target.add())
        _touch(target.add())
    elif _is_repeated(field):
        target.extend([_scalar(field), _scalar(field, alt=True)])
    else:
        _touch(target)


def _skip_if_newer_than_tensorboard(ours: Descriptor, field_name: str) -> None:
    theirs = _counterpart(ours)
    assert isinstance(theirs, Descriptor)
    if OLDER_TENSORBOARD and field_name not in theirs.fields_by_name:
        pytest.skip(f"{field_name} was added after tensorboard {tensorboard.__version__}")


FIELD_CASES = [
    pytest.param(desc, field.name, id=field.full_name)
    for desc in OUR_MESSAGES
    if not desc.GetOptions().map_entry
    for field in desc.fields
]


@pytest.mark.parametrize(("ours", "field_name"), FIELD_CASES)
def test_each_field_survives_ours_to_tensorboard(ours: Descriptor, field_name: str) -> None:
    _skip_if_newer_than_tensorboard(ours, field_name)
    msg = _class_of(ours)()
    _set_one_field(msg, ours.fields_by_name[field_name])
    wire = msg.SerializeToString()
    assert wire, "sample value was a default and never hit the wire"

    theirs = _tb_class(ours).FromString(wire)
    assert _dict(theirs) == _dict(msg)
    assert theirs.SerializeToString(deterministic=True) == msg.SerializeToString(deterministic=True)


@pytest.mark.parametrize(("ours", "field_name"), FIELD_CASES)
def test_each_field_survives_tensorboard_to_ours(ours: Descriptor, field_name: str) -> None:
    _skip_if_newer_than_tensorboard(ours, field_name)
    tb_cls = _tb_class(ours)
    msg = tb_cls()
    _set_one_field(msg, tb_cls.DESCRIPTOR.fields_by_name[field_name])
    wire = msg.SerializeToString()
    assert wire

    parsed = _class_of(ours).FromString(wire)
    assert _dict(parsed) == _dict(msg)
    assert parsed.SerializeToString(deterministic=True) == msg.SerializeToString(deterministic=True)


def _our_scalar_event() -> Message:
    event_cls = _our_class("event", "Event")
    pr_data = _our_class("plugin_pr_curve", "PrCurvePluginData")(version=0, num_thresholds=3)
    types = _ours("types")
    summary_pb2 = _ours("summary")
    event = event_cls(wall_time=1700000000.25, step=42)
    event.source_metadata.writer = "mxsidecar"
    value = event.summary.value.add(tag="loss/pr")
    value.metadata.plugin_data.plugin_name = "pr_curves"
    value.metadata.plugin_data.content = pr_data.SerializeToString()
    value.metadata.display_name = "PR"
    value.metadata.summary_description = "precision/recall"
    value.metadata.data_class = summary_pb2.DATA_CLASS_TENSOR
    value.tensor.dtype = types.DT_FLOAT
    value.tensor.tensor_shape.dim.add(size=6, name="stat")
    value.tensor.tensor_shape.dim.add(size=3)
    value.tensor.float_val.extend([0.5 * i for i in range(18)])
    return event


def test_event_ours_to_tensorboard() -> None:
    ours = _our_scalar_event()
    theirs = tb_event_pb2.Event.FromString(ours.SerializeToString())

    assert theirs.wall_time == 1700000000.25
    assert theirs.step == 42
    assert theirs.WhichOneof("what") == "summary"
    assert theirs.source_metadata.writer == "mxsidecar"
    (value,) = theirs.summary.value
    assert value.tag == "loss/pr"
    assert value.WhichOneof("value") == "tensor"
    assert value.metadata.plugin_data.plugin_name == "pr_curves"
    assert value.metadata.display_name == "PR"
    assert value.metadata.summary_description == "precision/recall"
    assert value.metadata.data_class == tb_summary_pb2.DATA_CLASS_TENSOR
    content = tb_pr_curve_pb2.PrCurvePluginData.FromString(value.metadata.plugin_data.content)
    assert (content.version, content.num_thresholds) == (0, 3)
    assert value.tensor.dtype == tb_types_pb2.DT_FLOAT
    assert [(d.size, d.name) for d in value.tensor.tensor_shape.dim] == [
        (6, "stat"),
        (3, ""),
    ]
    assert list(value.tensor.float_val) == [0.5 * i for i in range(18)]
    assert _dict(theirs) == _dict(ours)


def _tb_hparams_payloads() -> list[Message]:
    start = tb_hparams_pb2.HParamsPluginData(version=0)
    start.session_start_info.hparams["lr"].number_value = 0.125
    start.session_start_info.hparams["optimizer"].string_value = "adam"
    start.session_start_info.hparams["amp"].bool_value = True
    start.session_start_info.group_name = "g1"

    experiment = tb_hparams_pb2.HParamsPluginData(version=0)
    lr = experiment.experiment.hparam_infos.add(name="lr", type=tb_hparams_api_pb2.DATA_TYPE_FLOAT64)
    lr.domain_interval.min_value = 1e-4
    lr.domain_interval.max_value = 1.0
    experiment.experiment.hparam_infos.add(
        name="optimizer",
        type=tb_hparams_api_pb2.DATA_TYPE_STRING,
        domain_discrete=struct_pb2.ListValue(
            values=[
                struct_pb2.Value(string_value="adam"),
                struct_pb2.Value(string_value="sgd"),
            ]
        ),
    )
    metric = experiment.experiment.metric_infos.add(dataset_type=tb_hparams_api_pb2.DATASET_VALIDATION)
    metric.name.group, metric.name.tag = "validation", "accuracy"

    end = tb_hparams_pb2.HParamsPluginData(version=0)
    end.session_end_info.status = tb_hparams_api_pb2.STATUS_SUCCESS
    end.session_end_info.end_time_secs = 5.0
    return [start, experiment, end]


def _tb_events() -> dict[str, Message]:
    """One TensorBoard-built event per `what` member we care about."""
    summary_event = tb_event_pb2.Event(wall_time=2.5, step=7)
    for payload in _tb_hparams_payloads():
        value = summary_event.summary.value.add(tag="_hparams_/" + payload.WhichOneof("data"))
        value.metadata.plugin_data.plugin_name = "hparams"
        value.metadata.plugin_data.content = payload.SerializeToString()
        value.tensor.dtype = tb_types_pb2.DT_FLOAT
        value.tensor.float_val.append(0.0)
    text = summary_event.summary.value.add(tag="notes")
    text.metadata.plugin_data.plugin_name = "text"
    text.tensor.dtype = tb_types_pb2.DT_STRING
    text.tensor.string_val.append(b"**hello**")
    summary_event.summary.value.add(tag="hist").histo.bucket.extend([1.0, 2.0])
    summary_event.summary.value.add(tag="img").image.encoded_image_string = b"\x89PNG"

    graph = tb_graph_pb2.GraphDef()
    graph.versions.producer = 27
    node = graph.node.add(name="fc1/weight", op="Const", input=["^init"], device="/cpu:0")
    node.attr["dtype"].type = tb_types_pb2.DT_FLOAT
    node.attr["value"].tensor.tensor_shape.dim.add(size=4)
    node.attr["shape"].list.i.extend([4, 4])

    restart = tb_event_pb2.Event(step=100)
    restart.session_log.status = tb_event_pb2.SessionLog.START
    return {
        "file_version": tb_event_pb2.Event(wall_time=1.0, file_version="brain.Event:2"),
        "summary": summary_event,
        "graph_def": tb_event_pb2.Event(wall_time=3.0, graph_def=graph.SerializeToString()),
        "session_log": restart,
        "tagged_run_metadata": tb_event_pb2.Event(
            tagged_run_metadata=tb_event_pb2.TaggedRunMetadata(tag="s", run_metadata=b"x")
        ),
    }


@pytest.mark.parametrize("what", list(_tb_events()))
def test_event_tensorboard_to_ours(what: str) -> None:
    theirs = _tb_events()[what]
    ours = _our_class("event", "Event").FromString(theirs.SerializeToString())
    assert ours.WhichOneof("what") == what
    assert _dict(ours) == _dict(theirs)


def test_hparams_payloads_tensorboard_to_ours() -> None:
    hparams_cls = _our_class("plugin_hparams", "HParamsPluginData")
    for theirs in _tb_hparams_payloads():
        ours = hparams_cls.FromString(theirs.SerializeToString())
        assert ours.WhichOneof("data") == theirs.WhichOneof("data")
        assert _dict(ours) == _dict(theirs)
    start = hparams_cls.FromString(_tb_hparams_payloads()[0].SerializeToString())
    assert start.session_start_info.hparams["lr"].number_value == 0.125
    assert start.session_start_info.hparams["amp"].WhichOneof("kind") == "bool_value"


def test_graph_def_tensorboard_to_ours() -> None:
    theirs = tb_graph_pb2.GraphDef.FromString(_tb_events()["graph_def"].graph_def)
    ours = _our_class("graph", "GraphDef").FromString(theirs.SerializeToString())
    assert ours.versions.producer == 27
    assert list(ours.node[0].input) == ["^init"]
    assert list(ours.node[0].attr["shape"].list.i) == [4, 4]
    assert _dict(ours) == _dict(theirs)


def test_omitted_graph_fields_pass_through_as_unknown() -> None:
    theirs = tb_graph_pb2.GraphDef()
    theirs.node.add(name="a", op="NoOp")
    theirs.library.function.add().signature.name = "f"
    theirs.debug_info.files.append("model.py")
    ours = _our_class("graph", "GraphDef").FromString(theirs.SerializeToString())
    assert ours.node[0].name == "a"
    assert tb_graph_pb2.GraphDef.FromString(ours.SerializeToString()) == theirs


def test_projector_config_text_format_both_ways() -> None:
    # TensorBoard parses projector_config.pbtxt as text, which keys on names.
    ours = _our_class("projector_config", "ProjectorConfig")()
    ours.model_checkpoint_dir = "ckpt"
    emb = ours.embeddings.add(tensor_name="emb", tensor_path="emb.tsv", metadata_path="meta.tsv")
    emb.tensor_shape.extend([100, 16])
    emb.sprite.image_path = "sprite.png"
    emb.sprite.single_image_dim.extend([28, 28])
    emb.bookmarks_path = "bookmarks.txt"

    theirs = text_format.Parse(text_format.MessageToString(ours), tb_projector_pb2.ProjectorConfig())
    assert _dict(theirs) == _dict(ours)
    back = text_format.Parse(text_format.MessageToString(theirs), type(ours)())
    assert back == ours


# --- Coexistence in one process --------------------------------------------


def _run(code: str) -> subprocess.CompletedProcess[str]:
    # A fresh interpreter: the default descriptor pool is process-global and
    # this test process has already imported everything in one fixed order.
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


_IMPORT_OURS = "\n".join(f"import mxsidecar.formats.proto.{stem}_pb2" for stem in _proto_stems())
_IMPORT_THEIRS = "\n".join(f"import {module}" for modules, _ in COUNTERPARTS.values() for module in modules)


@pytest.mark.parametrize("first", ["ours", "tensorboard"])
def test_ours_and_tensorboard_import_in_one_process(first: str) -> None:
    imports = [_IMPORT_OURS, _IMPORT_THEIRS]
    if first == "tensorboard":
        imports.reverse()
    result = _run(
        "\n".join(imports)
        + """
from google.protobuf import descriptor_pool
from mxsidecar.formats.proto import _runtime, event_pb2
import tensorboard.compat.proto.event_pb2 as tb
ours = _runtime.POOL.FindMessageTypeByName("mxsidecar.tb.Event")
theirs = descriptor_pool.Default().FindMessageTypeByName("tensorboard.Event")
assert ours is event_pb2.Event.DESCRIPTOR and theirs is tb.Event.DESCRIPTOR
assert ours.file.name != theirs.file.name
ev = event_pb2.Event(step=3, file_version="brain.Event:2")
assert tb.Event.FromString(ev.SerializeToString()).step == 3
print("ok")
"""
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_clash_would_be_detected() -> None:
    # Control for the test above: our event.proto declared in tensorboard's
    # package (the mxboard#49 situation) must fail to register, loudly.
    result = _run(
        """
        import tensorboard.compat.proto.event_pb2
        from google.protobuf import descriptor_pb2, descriptor_pool
        from mxsidecar.formats.proto import event_pb2

        clone = descriptor_pb2.FileDescriptorProto()
        event_pb2.DESCRIPTOR.CopyToProto(clone)
        clone.name = "clash/event.proto"
        clone.package = "tensorboard"
        # Ours lives in a private pool: point the clone at TensorBoard's own files.
        ours, theirs = "mxsidecar/formats/proto/", "tensorboard/compat/proto/"
        clone.dependency[:] = [d.replace(ours, theirs) for d in clone.dependency]
        stack = list(clone.message_type)
        while stack:
            msg = stack.pop()
            stack.extend(msg.nested_type)
            for field in msg.field:
                field.type_name = field.type_name.replace(".mxsidecar.tb.", ".tensorboard.")
        try:
            descriptor_pool.Default().AddSerializedFile(clone.SerializeToString())
        except Exception as exc:
            print("clash:", exc)
        else:
            print("no clash")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("clash:"), result.stdout
    assert "tensorboard.Event" in result.stdout
