from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class PrCurvePluginData(_message.Message):
    __slots__ = ("version", "num_thresholds")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    version: int
    num_thresholds: int
    def __init__(self, version: _Optional[int] = ..., num_thresholds: _Optional[int] = ...) -> None: ...
