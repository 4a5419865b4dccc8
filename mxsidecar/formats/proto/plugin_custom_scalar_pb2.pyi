from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Layout(_message.Message):
    __slots__ = ("version", "category")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    version: int
    category: _containers.RepeatedCompositeFieldContainer[Category]
    def __init__(self, version: _Optional[int] = ..., category: _Optional[_Iterable[_Union[Category, _Mapping]]] = ...) -> None: ...

class Category(_message.Message):
    __slots__ = ("title", "chart", "closed")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    CHART_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    title: str
    chart: _containers.RepeatedCompositeFieldContainer[Chart]
    closed: bool
    def __init__(self, title: _Optional[str] = ..., chart: _Optional[_Iterable[_Union[Chart, _Mapping]]] = ..., closed: bool = ...) -> None: ...

class Chart(_message.Message):
    __slots__ = ("title", "multiline", "margin")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    MULTILINE_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    title: str
    multiline: MultilineChartContent
    margin: MarginChartContent
    def __init__(self, title: _Optional[str] = ..., multiline: _Optional[_Union[MultilineChartContent, _Mapping]] = ..., margin: _Optional[_Union[MarginChartContent, _Mapping]] = ...) -> None: ...

class MultilineChartContent(_message.Message):
    __slots__ = ("tag",)
    TAG_FIELD_NUMBER: _ClassVar[int]
    tag: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tag: _Optional[_Iterable[str]] = ...) -> None: ...

class MarginChartContent(_message.Message):
    __slots__ = ("series",)
    class Series(_message.Message):
        __slots__ = ("value", "lower", "upper")
        VALUE_FIELD_NUMBER: _ClassVar[int]
        LOWER_FIELD_NUMBER: _ClassVar[int]
        UPPER_FIELD_NUMBER: _ClassVar[int]
        value: str
        lower: str
        upper: str
        def __init__(self, value: _Optional[str] = ..., lower: _Optional[str] = ..., upper: _Optional[str] = ...) -> None: ...
    SERIES_FIELD_NUMBER: _ClassVar[int]
    series: _containers.RepeatedCompositeFieldContainer[MarginChartContent.Series]
    def __init__(self, series: _Optional[_Iterable[_Union[MarginChartContent.Series, _Mapping]]] = ...) -> None: ...
