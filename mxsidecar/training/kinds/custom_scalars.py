"""The Custom Scalars layout (``add_custom_scalars``), tensorboardX's format.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/custom_scalars.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

import re
from typing import Any

from ...wire.descriptors import Kind
from .. import arguments as v
from ._base import KindCalls, _now

__all__ = ["CustomScalarsCalls"]


def check_layout(layout: Any) -> dict[str, dict[str, list[Any]]]:
    """tensorboardX's custom-scalars layout:
    ``{category: {chart: ['Multiline', [tag regexes]] or ['Margin', [value, lower, upper]]}}``."""
    if not isinstance(layout, dict) or not layout:
        raise TypeError("layout must be a non-empty dict of category title to {chart title: [kind, tags]}")
    out: dict[str, dict[str, list[Any]]] = {}
    for category, charts in layout.items():
        v.check_tag(category, "layout category")
        if not isinstance(charts, dict) or not charts:
            raise TypeError(f"layout[{category!r}] must be a non-empty dict of chart title to [kind, tags]")
        out[category] = {}
        for chart, spec in charts.items():
            v.check_tag(chart, "layout chart title")
            where = f"layout[{category!r}][{chart!r}]"
            if not isinstance(spec, (list, tuple)) or len(spec) != 2 or spec[0] not in ("Multiline", "Margin"):
                raise ValueError(f"{where} must be ['Multiline', [tags...]] or ['Margin', [value, lower, upper]]")
            kind, tags = spec
            if not isinstance(tags, (list, tuple)) or not tags or not all(isinstance(t, str) and t for t in tags):
                raise ValueError(f"{where} tags must be a non-empty list of non-empty str")
            for t in tags:
                v.check_text(t, f"{where} tag")
            if kind == "Margin" and len(tags) != 3:
                raise ValueError(f"{where}: a Margin chart takes exactly [value, lower, upper] tags, got {len(tags)}")
            if kind == "Multiline":
                for t in tags:
                    try:
                        re.compile(t)
                    except re.error as exc:
                        raise ValueError(f"{where}: {t!r} is not a valid regular expression: {exc}") from exc
            out[category][chart] = [kind, list(tags)]
    return out


class CustomScalarsCalls(KindCalls):
    def add_custom_scalars(self, layout: dict[str, dict[str, list[Any]]]) -> None:
        """Arrange scalar charts in TensorBoard's Custom Scalars tab.

        ``layout``: ``{category: {chart: ['Multiline', [tag regexes]] or
        ['Margin', [value_tag, lower_tag, upper_tag]]}}`` (tensorboardX's format).
        """
        self._pipe.submit(
            Kind.CUSTOM_SCALARS, "custom_scalars__config__", 0, _now(), options={"layout": check_layout(layout)}
        )
