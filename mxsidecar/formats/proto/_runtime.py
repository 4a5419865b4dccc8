"""Message classes built at import time, in a private pool, on protobuf 3.20 to 7.x.

Why not protoc's gencode: generated modules are tied to the runtime that made them.
Gencode from protoc 26+ calls ``ValidateProtobufRuntimeVersion`` and refuses any
older runtime (and one major newer); gencode from protoc 3.19 leans on APIs that
each major deprecates.  The AWS MXNet 1.9 images pin protobuf 3.20.3, TensorBoard
2.21 needs 6.31+, and a user may hold either.  A serialized ``FileDescriptorProto``
is the one form every runtime since 3.x accepts, so each ``*_pb2`` module here
carries its file's bytes (made by ``generate.py`` with protoc) and calls
:func:`load`, which turns them into classes with whatever runtime is installed,
pure-Python or C (cpp/upb).  wandb's alternative, one gencode set per protobuf
major, multiplies the checked-in code by four and still breaks on the next major.

Why a private pool: our messages then cannot clash with TensorBoard's or
TensorFlow's in the default pool (mxboard#49 registered its own copy of
``tensorboard.Event`` and broke every process that also imported TensorBoard),
whatever either side names its files.

The differences between runtimes this smooths over, each measured:

* classes: ``message_factory.GetMessageClass`` (4.21.x+) or, before it,
  ``MessageFactory(pool).GetPrototype`` (removed in 6.x);
* nested classes (``Summary.Value``): 3.20's factory does not attach them to the
  outer class, so :func:`load` does;
* enums: gencode's module-level constants (``DT_FLOAT``) and enum wrappers
  (``DataClass``) come from the descriptors, and nested enum values
  (``SessionLog.START``) are attached where the runtime did not;
* well-known dependencies (``google/protobuf/struct.proto`` for hparams) are taken
  from the installed runtime's own descriptor, so they match it.

Only the sidecar and the inspect tool import these modules; the training side
never does (``tests/test_layering.py``).
"""

from __future__ import annotations

from typing import Any, Callable

import google.protobuf
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FileDescriptor
from google.protobuf.internal import enum_type_wrapper

__all__ = ["POOL", "VERSION", "ProtobufUnsupported", "implementation", "load", "message_class"]

VERSION: str = google.protobuf.__version__

# Our files' well-known dependencies, added to the pool from the runtime's own modules.
_WELL_KNOWN = {
    "google/protobuf/struct.proto": "google.protobuf.struct_pb2",
}


class ProtobufUnsupported(ImportError):
    """The installed protobuf cannot build mxsidecar's messages."""


def implementation() -> str:
    """'upb', 'cpp' or 'python': the protobuf backend in this process."""
    try:
        from google.protobuf.internal import api_implementation

        return str(api_implementation.Type())
    except Exception:  # pragma: no cover - every supported runtime has it
        return "unknown"


POOL = descriptor_pool.DescriptorPool()
_classes: dict[str, Any] = {}


def _class_factory() -> Callable[[Descriptor], Any]:
    get = getattr(message_factory, "GetMessageClass", None)
    if get is not None:
        return get  # type: ignore[no-any-return]
    factory = message_factory.MessageFactory(POOL)
    return factory.GetPrototype  # type: ignore[attr-defined,no-any-return]


_make_class = _class_factory()


def _unsupported(what: str, exc: BaseException) -> ProtobufUnsupported:
    err = ProtobufUnsupported(
        f"mxsidecar cannot build its protobuf messages ({what}) with protobuf "
        f"{VERSION} ({implementation()} implementation): {exc!r}. "
        "mxsidecar supports protobuf >= 3.20, < 8: pip install 'protobuf>=3.20,<8'"
    )
    err.__cause__ = exc
    return err


def _add(serialized: bytes, name: str) -> FileDescriptor:
    try:
        return POOL.FindFileByName(name)
    except KeyError:
        pass
    try:
        POOL.AddSerializedFile(serialized)
        return POOL.FindFileByName(name)
    except Exception as exc:
        raise _unsupported(name, exc) from exc


def _add_well_known(name: str) -> None:
    import importlib

    module = importlib.import_module(_WELL_KNOWN[name])
    _add(module.DESCRIPTOR.serialized_pb, name)


def message_class(desc: Descriptor) -> Any:
    """The class of ``desc`` (a descriptor in :data:`POOL`), nested classes attached."""
    cls = _classes.get(desc.full_name)
    if cls is None:
        cls = _classes[desc.full_name] = _make_class(desc)
        for nested in desc.nested_types:
            nested_cls = message_class(nested)
            if getattr(cls, nested.name, None) is not nested_cls:
                setattr(cls, nested.name, nested_cls)
        for enum in desc.enum_types:
            _attach_enum(cls, enum)
    return cls


def _attach_enum(target: Any, enum: EnumDescriptor) -> None:
    """``Msg.Status`` (a wrapper with Name/Value) and ``Msg.START`` (a number), as gencode has."""
    if not hasattr(target, enum.name):
        setattr(target, enum.name, enum_type_wrapper.EnumTypeWrapper(enum))
    for value in enum.values:
        if getattr(target, value.name, None) != value.number:
            setattr(target, value.name, value.number)


class _Namespace:
    """Adapts a module's globals() so :func:`_attach_enum` can fill it like a class."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.__dict__ = namespace


def load(serialized: bytes, namespace: dict[str, Any]) -> FileDescriptor:
    """Add one serialized ``FileDescriptorProto`` to :data:`POOL` and fill ``namespace``
    (a ``*_pb2`` module's globals) with what gencode would put there: its messages,
    top-level enums and their values, and ``DESCRIPTOR``.  The module imports the
    modules of its dependencies first, so they are in the pool already."""
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(serialized)
        for dep in proto.dependency:
            if dep in _WELL_KNOWN:
                _add_well_known(dep)
    except Exception as exc:
        raise _unsupported("a serialized descriptor", exc) from exc
    file = _add(serialized, proto.name)
    try:
        for msg in file.message_types_by_name.values():
            namespace[msg.name] = message_class(msg)
        module = _Namespace(namespace)
        for enum in file.enum_types_by_name.values():
            _attach_enum(module, enum)
    except Exception as exc:
        raise _unsupported(proto.name, exc) from exc
    namespace["DESCRIPTOR"] = file
    return file
