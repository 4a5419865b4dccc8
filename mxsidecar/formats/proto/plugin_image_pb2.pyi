from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ImagePluginData(_message.Message):
    __slots__ = ("version", "converted_to_tensor")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONVERTED_TO_TENSOR_FIELD_NUMBER: _ClassVar[int]
    version: int
    converted_to_tensor: bool
    def __init__(self, version: _Optional[int] = ..., converted_to_tensor: bool = ...) -> None: ...
