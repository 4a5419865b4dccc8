"""Custom scalars: one serialized ``Layout`` for the ``custom_scalars`` dashboard.

Contract (TensorBoard ``plugins/custom_scalar/metadata.py``, ``summary.py``,
``layout.proto``): tag ``custom_scalars__config__``, plugin ``custom_scalars`` with
empty content, data class TENSOR (what TensorBoard's loader assigns), value a DT_STRING
**scalar** tensor holding ``Layout{version: 0, category: [Category{title, chart:
[Chart{title, multiline{tag: [regex]} | margin{series: [{value, lower, upper}]}}]}]}``.
TensorBoard reads one point of the tag per run (``.item()`` of its numpy value, hence
the scalar) and merges the layouts of all runs, joining categories of the same title.

The layout arrives in tensorboardX's format::

    {category_title: {chart_title: ["Multiline", [tag_regex, ...]]
                                 | ["Margin", [value_tag, lower_tag, upper_tag]]}}

A Margin chart may also list several ``[value, lower, upper]`` triples (the proto
allows many series; tensorboardX writes one).  The kind is matched case-insensitively;
anything else is refused rather than silently taken as Multiline as tensorboardX does.
Tag patterns are checked with Python's ``re``, which TensorBoard's backend uses to
match them (an invalid pattern draws an empty chart with a warning).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...formats.proto import plugin_custom_scalar_pb2, summary_pb2, types_pb2
from ...wire.descriptors import Descriptor
from . import Encoded

PLUGIN_NAME = "custom_scalars"
PROTO_VERSION = 0
CONFIG_SUMMARY_TAG = "custom_scalars__config__"


def create_summary_metadata() -> summary_pb2.SummaryMetadata:
    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_TENSOR)
    md.plugin_data.plugin_name = PLUGIN_NAME  # content stays empty, as TensorBoard's own
    return md


METADATA = create_summary_metadata()


def _is_str_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(s, str) for s in x)


def _margin_series(where: str, tags: Any) -> list[Sequence[str]]:
    """``[v, lo, hi]`` or ``[[v, lo, hi], ...]`` as a list of triples."""
    if _is_str_list(tags) and len(tags) == 3:
        return [tags]
    if isinstance(tags, (list, tuple)) and tags and all(_is_str_list(t) and len(t) == 3 for t in tags):
        return list(tags)
    raise ValueError(f"{where}: a Margin chart needs [value_tag, lower_tag, upper_tag] or a list of them, not {tags!r}")


def check_layout(layout: Any) -> None:
    """Raise TypeError/ValueError naming the first thing wrong with ``layout``.

    Free of protobuf and cheap: the writer calls it in the training thread.
    """
    if not isinstance(layout, Mapping):
        raise TypeError(f"layout must be a dict of categories, not {type(layout).__name__}")
    if not layout:
        raise ValueError("layout has no categories")
    for category, charts in layout.items():
        if not isinstance(category, str):
            raise TypeError(f"category titles must be strings, not {category!r}")
        if not isinstance(charts, Mapping):
            raise TypeError(f"category {category!r} must be a dict of charts, not {type(charts).__name__}")
        if not charts:
            raise ValueError(f"category {category!r} has no charts")
        for title, chart in charts.items():
            where = f"chart {title!r} of category {category!r}"
            if not isinstance(title, str):
                raise TypeError(f"chart titles must be strings, not {title!r} (category {category!r})")
            if not isinstance(chart, (list, tuple)) or len(chart) != 2 or not isinstance(chart[0], str):
                raise TypeError(f"{where} must be ['Multiline', [tag_regex, ...]] or ['Margin', [value, lower, upper]]")
            kind, tags = chart[0].lower(), chart[1]
            if kind == "margin":
                _margin_series(where, tags)
            elif kind == "multiline":
                if not _is_str_list(tags) or not tags:
                    raise ValueError(f"{where}: a Multiline chart needs a non-empty list of tag regexes, got {tags!r}")
                for pattern in tags:
                    try:
                        re.compile(pattern)
                    except re.error as e:
                        raise ValueError(f"{where}: tag regex {pattern!r} is invalid: {e}") from None
            else:
                raise ValueError(f"{where}: kind must be 'Multiline' or 'Margin', not {chart[0]!r}")


def layout_pb(layout: Mapping[str, Mapping[str, Sequence[Any]]]) -> plugin_custom_scalar_pb2.Layout:
    """The ``Layout`` of a checked layout: categories and charts in the given order."""
    check_layout(layout)
    out = plugin_custom_scalar_pb2.Layout(version=PROTO_VERSION)
    for category_title, charts in layout.items():
        category = out.category.add(title=category_title)
        for chart_title, (kind, tags) in charts.items():
            chart = category.chart.add(title=chart_title)
            if kind.lower() == "margin":
                for value, lower, upper in _margin_series(chart_title, tags):
                    chart.margin.series.add(value=value, lower=lower, upper=upper)
            else:
                chart.multiline.tag.extend(tags)
    return out


def custom_scalars_pb(layout: Mapping[str, Mapping[str, Sequence[Any]]]) -> summary_pb2.Summary.Value:
    v = summary_pb2.Summary.Value(tag=CONFIG_SUMMARY_TAG)
    v.tensor.dtype = types_pb2.DT_STRING
    v.tensor.string_val.append(layout_pb(layout).SerializeToString())
    v.tensor.tensor_shape.SetInParent()  # rank 0
    return v


def encode(desc: Descriptor, data: Any = None) -> list[Encoded]:
    try:
        layout: Any = (desc.options or {}).get("layout")
        value = custom_scalars_pb(layout)
    except TypeError as e:  # the sidecar refuses an item on ValueError; anything else is a bug of ours
        raise ValueError(str(e)) from e
    return [Encoded(desc.run, value, METADATA)]
