"""What the integrations share: the writer they need, argument checks, and classes that
take MXNet base classes only when first used (so importing them never imports mxnet)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar


class WriterLike(Protocol):
    """What the integrations need of a writer (positional arguments only)."""

    def add_scalar(self, tag: str, value: Any, global_step: int | None = None, /) -> None: ...

    def add_histogram(self, tag: str, values: Any, global_step: int | None = None, /) -> None: ...


def _check_every(value: Any, name: str, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def _check_prefix(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def _join(prefix: str, name: str) -> str:
    """``'train'`` + ``'accuracy'`` -> ``'train/accuracy'``; an empty prefix adds nothing."""
    return f"{prefix.rstrip('/')}/{name}" if prefix else name


def _log_name_values(writer: WriterLike, prefix: str, pairs: Iterable[tuple[str, Any]], step: int) -> None:
    for name, value in pairs:
        writer.add_scalar(_join(prefix, str(name)), value, step)


# -- classes that derive from MXNet's, given their bases on first use --------------------


_DERIVED: dict[type, type] = {}


def _with_base(cls: type, base_path: tuple[str, ...]) -> type:
    """``cls`` combined with MXNet classes (``base_path``: dotted names of classes under
    ``mxnet``), created once per class; ``cls`` itself if it already derives from them."""
    derived = _DERIVED.get(cls)
    if derived is None:
        import importlib

        bases = []
        for dotted in base_path:
            module, _, name = dotted.rpartition(".")
            bases.append(getattr(importlib.import_module(module), name))
        if all(issubclass(cls, b) for b in bases):
            derived = cls
        else:
            derived = type(cls.__name__, (cls, *bases), {"__module__": cls.__module__, "__doc__": cls.__doc__})
        _DERIVED[cls] = derived
    return derived


_D = TypeVar("_D", bound="_DerivesFromMXNet")


class _DerivesFromMXNet:
    """Instances are of ``cls`` combined with ``_MXNET_BASES``, made on first use."""

    _MXNET_BASES: tuple[str, ...] = ()

    def __new__(cls: type[_D], *args: Any, **kwargs: Any) -> _D:
        obj: _D = object.__new__(_with_base(cls, cls._MXNET_BASES))
        return obj
