"""Hyperparameters: the ``hparams`` plugin's three metadata-only values, plus metrics.

Contract (TensorBoard ``plugins/hparams/metadata.py``, ``summary_v2.py``): plugin
``hparams``, content an ``HParamsPluginData{version: 0}`` holding one of

- ``_hparams_/experiment``: ``Experiment{hparam_infos, metric_infos, time_created_secs}``;
- ``_hparams_/session_start_info``: ``SessionStartInfo{hparams, group_name, start_time_secs}``;
- ``_hparams_/session_end_info``: ``SessionEndInfo{status, end_time_secs}``,

each on a value carrying TensorBoard's NULL tensor (DT_FLOAT, shape [0]): the data is
the metadata.  The descriptor's ``start`` and ``end`` options (both True when absent)
say which of them a call writes: the experiment and the session start, the session
end, or both.  A session is a run holding a session_start_info, here the writer's own
run (not tensorboardX's extra sub-run per call).  A metric is an ordinary scalar whose
tag is ``MetricName.tag`` in the session's run (``group`` '' means that run itself),
so each metric is also written as a ``scalars`` value at the descriptor's step.

What TensorBoard does with these, and what it means for a writer:

- TensorBoard keeps the first metadata of a tag per run (across the run's files), so
  each of the three is written once per run, and the writer (``training/kinds/
  hparams.py``) decides when: the experiment and session start at a run's first
  ``add_hparams``, the session end at its first call with status SUCCESS or FAILURE.
  A RUNNING call writes no end, since that end would be final: TensorBoard shows no
  status (Unknown) until the run's session ends.
- When any run holds an experiment, TensorBoard takes the experiment of one of them
  (whichever comes first) for the whole logdir: hparams and metrics declared only in
  other runs' experiments do not get columns.
- A metric's scalar shares the run with the user's scalars: a metric named like an
  existing series (``loss``) adds a point to that series at the descriptor's step,
  and the hparams table shows the series' last point, whichever step wrote it.
- Types follow TensorBoard's ``summary_v2``: bool -> BOOL, int and float -> FLOAT64
  (there is no integer type), str -> STRING.  Non-finite numbers are refused:
  ``json_format`` cannot serialize NaN or Infinity in a ``google.protobuf.Value``,
  which the plugin's responses are made of.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Union

from google.protobuf import struct_pb2

from ...formats.proto import plugin_hparams_pb2, summary_pb2, tensor_pb2, types_pb2
from ...wire.descriptors import Descriptor
from . import Encoded
from .scalar import METADATA as SCALAR_METADATA
from .scalar import scalar_pb

PLUGIN_NAME = "hparams"
PROTO_VERSION = 0

EXPERIMENT_TAG = "_hparams_/experiment"
SESSION_START_INFO_TAG = "_hparams_/session_start_info"
SESSION_END_INFO_TAG = "_hparams_/session_end_info"

STATUSES = {
    "UNKNOWN": plugin_hparams_pb2.STATUS_UNKNOWN,
    "SUCCESS": plugin_hparams_pb2.STATUS_SUCCESS,
    "FAILURE": plugin_hparams_pb2.STATUS_FAILURE,
    "RUNNING": plugin_hparams_pb2.STATUS_RUNNING,
}

HParamValue = Union[bool, int, float, str]  # a run-time alias: X | Y is 3.10+


def create_summary_metadata(data: plugin_hparams_pb2.HParamsPluginData) -> summary_pb2.SummaryMetadata:
    content = plugin_hparams_pb2.HParamsPluginData()
    content.CopyFrom(data)
    content.version = PROTO_VERSION
    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_TENSOR)
    md.plugin_data.plugin_name = PLUGIN_NAME
    md.plugin_data.content = content.SerializeToString()
    return md


def _null_tensor() -> tensor_pb2.TensorProto:
    # TensorBoard's NULL_TENSOR: the smallest valid tensor (6 bytes serialized).
    t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT)
    t.tensor_shape.dim.add(size=0)
    return t


NULL_TENSOR = _null_tensor()


def _data_type(name: str, value: Any) -> plugin_hparams_pb2.DataType:
    # bool before int: True is an int to isinstance
    if isinstance(value, bool):
        return plugin_hparams_pb2.DATA_TYPE_BOOL
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"hparam {name!r} is {value}: TensorBoard cannot serialize NaN or Infinity")
        return plugin_hparams_pb2.DATA_TYPE_FLOAT64
    if isinstance(value, str):
        return plugin_hparams_pb2.DATA_TYPE_STRING
    raise TypeError(f"hparam {name!r} must be a bool, int, float or str, not {type(value).__name__}")


def check_hparams(
    hparams: Mapping[str, Any], metrics: Mapping[str, Any], domains: Mapping[str, Any] | None = None
) -> None:
    """Raise TypeError/ValueError naming what TensorBoard could not show.

    Cheap and free of protobuf: the writer can call it in the training thread.
    """
    if not isinstance(hparams, Mapping):
        raise TypeError(f"hparams must be a dict, not {type(hparams).__name__}")
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a dict, not {type(metrics).__name__}")
    types: dict[str, plugin_hparams_pb2.DataType] = {}
    for name, value in hparams.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"hparam names must be non-empty strings, not {name!r}")
        types[name] = _data_type(name, value)
    for tag, value in metrics.items():
        if not isinstance(tag, str) or not tag:
            raise TypeError(f"metric tags must be non-empty strings, not {tag!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"metric {tag!r} must be an int or float, not {type(value).__name__}")
    for name, domain in (domains or {}).items():
        if name not in types:
            raise ValueError(f"domain given for {name!r}, which is not among the hparams")
        if isinstance(domain, Mapping):
            if types[name] != plugin_hparams_pb2.DATA_TYPE_FLOAT64:
                raise TypeError(f"hparam {name!r} is not a number, so its domain cannot be an interval")
            if set(domain) != {"min", "max"}:
                raise ValueError(f"interval domain of {name!r} needs exactly 'min' and 'max', got {sorted(domain)}")
            lo, hi = domain["min"], domain["max"]
            if _data_type(name, lo) != types[name] or _data_type(name, hi) != types[name]:
                raise TypeError(f"interval of {name!r} needs numbers, got {lo!r} and {hi!r}")
            if lo > hi:
                raise ValueError(f"interval of {name!r} is empty: min {lo} > max {hi}")
        elif isinstance(domain, (list, tuple)):
            if not domain:
                raise ValueError(f"discrete domain of {name!r} is empty")
            for v in domain:
                if _data_type(name, v) != types[name]:
                    raise TypeError(f"discrete domain of {name!r} holds {v!r}, not of the hparam's type")
        else:
            raise TypeError(f"domain of {name!r} must be a list of values or {{'min': .., 'max': ..}}")


def experiment_pb(
    hparams: Mapping[str, HParamValue],
    metrics: Mapping[str, float],
    domains: Mapping[str, Any] | None = None,
    time_created_secs: float = 0.0,
) -> plugin_hparams_pb2.Experiment:
    exp = plugin_hparams_pb2.Experiment(time_created_secs=time_created_secs)
    domains = domains or {}
    for name, value in hparams.items():
        info = exp.hparam_infos.add(name=name, type=_data_type(name, value))
        domain = domains.get(name)
        if isinstance(domain, Mapping):
            info.domain_interval.min_value = float(domain["min"])
            info.domain_interval.max_value = float(domain["max"])
        elif domain is not None:
            info.domain_discrete.extend(list(domain))
    for tag in metrics:
        exp.metric_infos.add().name.tag = tag
    return exp


def _set_value(target: struct_pb2.Value, value: HParamValue) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, str):
        target.string_value = value
    else:
        target.number_value = value


def session_start_pb(
    hparams: Mapping[str, HParamValue], group_name: str = "", start_time_secs: float = 0.0
) -> plugin_hparams_pb2.SessionStartInfo:
    """``group_name`` '' makes TensorBoard put the session in a group of its own."""
    info = plugin_hparams_pb2.SessionStartInfo(group_name=group_name, start_time_secs=start_time_secs)
    for name, value in hparams.items():
        _set_value(info.hparams[name], value)
    return info


def session_end_pb(status: str = "SUCCESS", end_time_secs: float | None = None) -> plugin_hparams_pb2.SessionEndInfo:
    code = STATUSES.get(status.upper()) if isinstance(status, str) else None
    if code is None:
        raise ValueError(f"status must be one of {sorted(STATUSES)}, not {status!r}")
    info = plugin_hparams_pb2.SessionEndInfo(status=code)
    if end_time_secs is not None:
        info.end_time_secs = end_time_secs
    return info


def hparams_values(
    hparams: Mapping[str, HParamValue],
    metrics: Mapping[str, float],
    domains: Mapping[str, Any] | None = None,
    group_name: str = "",
    start_time: float = 0.0,
    end_time: float | None = None,
    status: str = "SUCCESS",
    start: bool = True,
    end: bool = True,
) -> list[tuple[summary_pb2.Summary.Value, summary_pb2.SummaryMetadata]]:
    """The plugin values with their metadata, in TensorBoard's tag order: the
    experiment and session start if ``start``, the session end if ``end``."""
    check_hparams(hparams, metrics, domains)
    data = plugin_hparams_pb2.HParamsPluginData
    end_info = session_end_pb(status, end_time)  # a bad status is refused whatever is written
    datas: list[tuple[str, plugin_hparams_pb2.HParamsPluginData]] = []
    if start:
        datas.append((EXPERIMENT_TAG, data(experiment=experiment_pb(hparams, metrics, domains, start_time))))
        datas.append(
            (SESSION_START_INFO_TAG, data(session_start_info=session_start_pb(hparams, group_name, start_time)))
        )
    if end:
        datas.append((SESSION_END_INFO_TAG, data(session_end_info=end_info)))
    out = []
    for tag, content in datas:
        value = summary_pb2.Summary.Value(tag=tag)
        value.tensor.CopyFrom(NULL_TENSOR)
        out.append((value, create_summary_metadata(content)))
    return out


def encode(desc: Descriptor, data: Any = None) -> list[Encoded]:
    opts = desc.options or {}
    try:
        plugin_values = hparams_values(
            opts.get("hparams", {}),
            opts.get("metrics", {}),
            opts.get("domains"),
            opts.get("group_name") or "",
            float(opts.get("start_time", desc.wall_time)),
            opts.get("end_time"),
            opts.get("status", "SUCCESS"),
            bool(opts.get("start", True)),
            bool(opts.get("end", True)),
        )
    except TypeError as e:  # the sidecar refuses an item on ValueError; anything else is a bug of ours
        raise ValueError(str(e)) from e
    out = [Encoded(desc.run, value, md) for value, md in plugin_values]
    metrics = opts.get("metrics", {})
    out.extend(Encoded(desc.run, scalar_pb(tag, float(v)), SCALAR_METADATA) for tag, v in metrics.items())
    return out
