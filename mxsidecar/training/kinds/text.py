"""Text (``add_text``): Markdown strings.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/text.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

from ...wire.descriptors import Kind
from .. import arguments as v
from ._base import KindCalls, _now

__all__ = ["TextCalls"]


class TextCalls(KindCalls):
    def add_text(self, tag: str, text: str, global_step: int | None = None, walltime: float | None = None) -> None:
        """Log a Markdown string for TensorBoard's Text tab.

        Parameters
        ----------
        tag : str
            Name of the text series.
        text : str
            Markdown; tables, code and links render as Markdown does.
        global_step, walltime
            As for :meth:`add_scalar`.
        """
        self._tag(tag)
        v.check_text(text)
        step = v.check_step(global_step)
        wall = _now() if walltime is None else v.check_walltime(walltime)
        self._pipe.submit(Kind.TEXT, tag, step, wall, text=text)
