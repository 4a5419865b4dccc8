"""PR curves, hparams, custom scalars and graphs, each judged by TensorBoard's own code:
its PR-curve computation (run with a stand-in for the TensorFlow it imports), its
hparams and layout parsers, its graph post-processing, and its plugins reading event
files through its Python loader."""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest

from mxsidecar.formats.proto import event_pb2, summary_pb2
from mxsidecar.sidecar.encoders import Encoded, custom_scalars, graph, hparams, pr_curve
from mxsidecar.sidecar.output.event_file import EventFile
from mxsidecar.wire.descriptors import Descriptor, Kind, Op

pytestmark = pytest.mark.timeout(120)

ALL_STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]


def desc(kind: Kind, tag: str = "t", run: str = "", step: int = 0, **kw: Any) -> Descriptor:
    return Descriptor(Op.ITEM, 1, kind, tag, step, 1000.0, run=run, **kw)


def tb_value(value: summary_pb2.Summary.Value) -> Any:
    """Our Value re-read as TensorBoard's own proto (the wire is the contract)."""
    from tensorboard.compat.proto import summary_pb2 as tb_summary

    return tb_summary.Summary.Value.FromString(value.SerializeToString())


def write_logdir(logdir: str, items: Iterable[tuple[Encoded, int]]) -> None:
    """Event files as the sidecar writes them: metadata on a tag's first value per run."""
    files: dict[str, EventFile] = {}
    for enc, step in items:
        ef = files.get(enc.run)
        if ef is None:
            ef = files[enc.run] = EventFile(
                os.path.join(logdir, enc.run), wall_time=time.time(), pid=os.getpid(), index=len(files)
            )
        value = summary_pb2.Summary.Value()
        value.CopyFrom(enc.value)
        if enc.metadata is not None and value.tag not in ef.tags_with_metadata:
            value.metadata.CopyFrom(enc.metadata)
            ef.tags_with_metadata.add(value.tag)
        event = event_pb2.Event(wall_time=1000.0 + step, step=step)
        event.summary.value.append(value)
        ef.append(event.SerializeToString())
    for ef in files.values():
        ef.close()


def tb_context(logdir: str) -> Any:
    """TensorBoard's plugin context over its Python loader (what ``--load_fast=false`` serves)."""
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, logdir)
    return base_plugin.TBContext(data_provider=provider, logdir=logdir, multiplexer=mux)


def request_context() -> Any:
    from tensorboard import context

    return context.RequestContext()


# -- PR curves ------------------------------------------------------------------


@pytest.fixture
def tb_pr_table(monkeypatch: pytest.MonkeyPatch) -> Callable[..., np.ndarray]:
    """TensorBoard's ``pr_curve.summary.pb``, with the four TensorFlow names it uses
    supplied by TensorBoard's own proto and tensor helpers (TensorFlow is not installed)."""
    from tensorboard.compat.proto import summary_pb2 as tb_summary
    from tensorboard.compat.tensorflow_stub import dtypes
    from tensorboard.plugins.pr_curve import summary
    from tensorboard.util import tensor_util

    v1 = types.ModuleType("tensorflow.compat.v1")
    v1.SummaryMetadata = tb_summary.SummaryMetadata  # type: ignore[attr-defined]
    v1.Summary = tb_summary.Summary  # type: ignore[attr-defined]
    v1.make_tensor_proto = tensor_util.make_tensor_proto  # type: ignore[attr-defined]
    v1.float32 = dtypes.float32  # type: ignore[attr-defined]
    compat = types.ModuleType("tensorflow.compat")
    compat.v1 = v1  # type: ignore[attr-defined]
    tf = types.ModuleType("tensorflow")
    tf.compat = compat  # type: ignore[attr-defined]
    for name, mod in (("tensorflow", tf), ("tensorflow.compat", compat), ("tensorflow.compat.v1", v1)):
        monkeypatch.setitem(sys.modules, name, mod)

    def table(labels: Any, predictions: Any, n: int, weights: Any = None) -> np.ndarray:
        s = summary.pb("t", labels, predictions, num_thresholds=n, weights=weights)
        assert s.value[0].metadata.plugin_data.content == pr_curve.create_summary_metadata(n).plugin_data.content
        return tensor_util.make_ndarray(s.value[0].tensor)

    return table


def our_pr_table(labels: Any, predictions: Any, n: int, weights: Any = None) -> np.ndarray:
    from tensorboard.util import tensor_util

    data = {"labels": labels, "predictions": predictions}
    if weights is not None:
        data["weights"] = weights
    (enc,) = pr_curve.encode(desc(Kind.PR_CURVE, "pr", options={"num_thresholds": n}), data)
    tensor = tb_value(enc.value).tensor
    assert tensor.dtype == 1 and [d.size for d in tensor.tensor_shape.dim] == [6, n]  # DT_FLOAT
    assert len(tensor.tensor_content) == 6 * n * 4  # raw little-endian float32
    out: np.ndarray = tensor_util.make_ndarray(tensor)
    return out


def pr_inputs(rng: np.random.Generator, size: int, n: int, pred_dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.random(size) < 0.4
    # a skewed score, plus every threshold exactly, 0 and 1, and float32 values whose
    # product with n - 1 floors differently in float32 and float64
    pred = np.clip(labels * 0.3 + rng.random(size) * 0.7, 0, 1)
    extra = np.concatenate([np.arange(n) / (n - 1), [0.0, 1.0, 0.85, 0.44, 0.835]])
    pred = np.concatenate([pred, extra]).astype(pred_dtype)
    labels = np.concatenate([labels, rng.random(extra.size) < 0.5])
    return labels, pred


@pytest.mark.parametrize("n", [2, 201, 1000])
@pytest.mark.parametrize(
    "pred_dtype,label_kind,weight_kind",
    [
        (np.float32, "bool", None),
        (np.float64, "int", None),
        (np.float32, "float", "float32"),
        (np.float64, "bool", "float64"),
        (np.float16, "bool", "int"),
    ],
)
def test_pr_curve_equals_tensorboards(tb_pr_table, n, pred_dtype, label_kind, weight_kind) -> None:
    rng = np.random.default_rng(n)
    labels, pred = pr_inputs(rng, 5000, n, pred_dtype)
    labels = {"bool": labels, "int": labels.astype(np.int64), "float": labels.astype(np.float32)}[label_kind]
    weights = None
    if weight_kind == "int":
        weights = rng.integers(0, 4, labels.size)
    elif weight_kind is not None:
        weights = rng.random(labels.size).astype(weight_kind) * 3
    ours = our_pr_table(labels.reshape(-1, 5) if labels.size % 5 == 0 else labels, pred, n, weights)
    np.testing.assert_array_equal(ours, tb_pr_table(labels, pred, n, weights))


def test_pr_curve_large_weighted_input_matches_tensorboard(tb_pr_table) -> None:
    # Beyond numpy's 65536-element histogram block the float64 sums may round
    # differently; after the float32 cast they agree to the last bit or next to it.
    rng = np.random.default_rng(7)
    labels, pred = pr_inputs(rng, 300_000, 201, np.float32)
    weights = rng.random(labels.size)
    np.testing.assert_allclose(
        our_pr_table(labels, pred, 201, weights), tb_pr_table(labels, pred, 201, weights), rtol=2e-7
    )


def test_pr_curve_values_by_hand() -> None:
    # thresholds 0, .5, 1: buckets floor(p * 2) -> 0.2:0, 0.6:1, 0.9:1, 1.0:2
    table = our_pr_table(np.array([0, 1, 0, 1]), np.array([0.2, 0.6, 0.9, 1.0]), 3)
    np.testing.assert_array_equal(
        table,
        np.array(
            [
                [2, 2, 1],  # TP at >= 0, >= .5, >= 1
                [2, 1, 0],  # FP
                [0, 1, 2],  # TN
                [0, 0, 1],  # FN
                [0.5, 2 / 3, 1],
                [1, 1, 0.5],
            ],
            dtype=np.float32,
        ),
    )


def test_pr_curve_empty_input_equals_tensorboards(tb_pr_table) -> None:
    empty_l, empty_p = np.zeros(0, bool), np.zeros(0, np.float32)
    np.testing.assert_array_equal(our_pr_table(empty_l, empty_p, 11), tb_pr_table(empty_l, empty_p, 11))


def test_pr_curve_float16_with_many_thresholds_stays_in_range() -> None:
    # 1.0 * 4999 rounds to 5000 in float16: TensorBoard would drop those predictions.
    table = our_pr_table(np.array([1, 0, 1]), np.array([1.0, 0.0, 0.5], np.float16), 5000)
    assert table.shape == (6, 5000)
    assert table[0, -1] == 1 and table[0, 0] == 2 and table[1, 0] == 1


@pytest.mark.parametrize(
    "labels,pred,weights,match",
    [
        ([0, 1], [0.5, np.nan], None, "1 of 2 predictions are NaN"),
        ([0, 1], [0.5, np.inf], None, "predictions are NaN, infinite or outside"),
        ([0, 1], [-0.01, 0.5], None, "outside \\[0, 1\\]"),
        ([0, 1], [0.5, 1.0001], None, "outside \\[0, 1\\]"),
        ([0, 2], [0.5, 0.5], None, "labels are neither 0 nor 1"),
        ([0, np.nan], [0.5, 0.5], None, "labels are neither 0 nor 1"),
        ([0, 1], [0.5, 0.5], [1.0, -1.0], "weights are negative"),
        ([0, 1], [0.5, 0.5], [1.0, np.nan], "weights are negative, NaN or infinite"),
        ([0, 1], [0.5, 0.5, 0.5], None, "differ in size"),
    ],
)
def test_pr_curve_refuses_what_tensorboard_cannot_draw(labels, pred, weights, match) -> None:
    data = {"labels": np.array(labels), "predictions": np.array(pred)}
    if weights is not None:
        data["weights"] = np.array(weights)
    with pytest.raises(ValueError, match=match):
        pr_curve.encode(desc(Kind.PR_CURVE, options={"num_thresholds": 11}), data)


def test_pr_curve_needs_two_thresholds() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        pr_curve.compute_curve(np.array([1]), np.array([0.5]), 1)


def test_pr_curve_read_by_tensorboards_plugin(tmp_path) -> None:
    from tensorboard.plugins.pr_curve import metadata, pr_curves_plugin

    rng = np.random.default_rng(3)
    labels, pred = pr_inputs(rng, 1000, 201, np.float32)
    d = desc(Kind.PR_CURVE, "val/pr", run="train", step=4)  # no options: TensorBoard's 201
    (enc,) = pr_curve.encode(d, {"labels": labels, "predictions": pred})
    assert enc.run == "train" and enc.counts is None
    content = metadata.parse_plugin_metadata(enc.metadata.plugin_data.content)
    assert (enc.metadata.plugin_data.plugin_name, content.version, content.num_thresholds) == ("pr_curves", 0, 201)
    write_logdir(str(tmp_path), [(enc, 4)])

    plugin = pr_curves_plugin.PrCurvesPlugin(tb_context(str(tmp_path)))
    (entry,) = plugin.pr_curves_impl(request_context(), "", ["train"], "val/pr")["train"]
    table = pr_curve.compute_curve(labels, pred, 201)
    assert entry["step"] == 4 and len(entry["thresholds"]) == 201
    assert entry["true_positives"] == [int(x) for x in table[0]]
    np.testing.assert_allclose(entry["precision"][:10], table[4][:10])


# -- hparams --------------------------------------------------------------------

HP_OPTIONS: dict[str, Any] = {
    "hparams": {"lr": 0.1, "layers": 3, "opt": "sgd", "bn": True},
    "metrics": {"accuracy": 0.75, "loss": 0.5},
    "domains": {"opt": ["sgd", "adam"], "lr": {"min": 0.001, "max": 1.0}, "layers": [2, 3, 4.5], "bn": [True, False]},
    "group_name": "g1",
    "start_time": 100.0,
    "end_time": 250.0,
    "status": "SUCCESS",
}


def test_hparams_values_parse_with_tensorboards_parsers() -> None:
    from tensorboard.plugins.hparams import api_pb2, metadata

    out = hparams.encode(desc(Kind.HPARAMS, "_hparams_", run="run1", step=9, options=HP_OPTIONS))
    tags = [e.value.tag for e in out]
    assert tags == [
        "_hparams_/experiment",
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
        "accuracy",
        "loss",
    ]
    assert all(e.run == "run1" for e in out)
    for e in out[:3]:
        assert e.metadata.plugin_data.plugin_name == "hparams"
        assert e.value.tensor.SerializeToString() == metadata.NULL_TENSOR.SerializeToString()

    exp = metadata.parse_experiment_plugin_data(out[0].metadata.plugin_data.content)
    infos = {i.name: i for i in exp.hparam_infos}
    assert [i.name for i in exp.hparam_infos] == ["lr", "layers", "opt", "bn"]
    assert infos["lr"].type == api_pb2.DATA_TYPE_FLOAT64
    assert (infos["lr"].domain_interval.min_value, infos["lr"].domain_interval.max_value) == (0.001, 1.0)
    assert infos["layers"].type == api_pb2.DATA_TYPE_FLOAT64  # TensorBoard has no integer type
    assert [v.number_value for v in infos["layers"].domain_discrete.values] == [2, 3, 4.5]
    assert infos["opt"].type == api_pb2.DATA_TYPE_STRING
    assert [v.string_value for v in infos["opt"].domain_discrete.values] == ["sgd", "adam"]
    assert infos["bn"].type == api_pb2.DATA_TYPE_BOOL
    assert [v.bool_value for v in infos["bn"].domain_discrete.values] == [True, False]
    assert [m.name.tag for m in exp.metric_infos] == ["accuracy", "loss"]
    assert all(m.name.group == "" for m in exp.metric_infos)
    assert exp.time_created_secs == 100.0

    start = metadata.parse_session_start_info_plugin_data(out[1].metadata.plugin_data.content)
    assert start.hparams["lr"].number_value == 0.1 and start.hparams["layers"].number_value == 3
    assert start.hparams["opt"].string_value == "sgd" and start.hparams["bn"].bool_value is True
    assert start.hparams["bn"].WhichOneof("kind") == "bool_value"
    assert (start.group_name, start.start_time_secs) == ("g1", 100.0)

    end = metadata.parse_session_end_info_plugin_data(out[2].metadata.plugin_data.content)
    assert (end.status, end.end_time_secs) == (api_pb2.STATUS_SUCCESS, 250.0)

    from tensorboard.plugins.scalar import metadata as scalar_metadata

    acc = tb_value(out[3].value)
    assert out[3].metadata.plugin_data.plugin_name == scalar_metadata.PLUGIN_NAME
    assert acc.tensor.float_val == [0.75]


@pytest.mark.parametrize("status,code", [("RUNNING", 3), ("FAILURE", 2), ("success", 1)])
def test_hparams_status_and_open_end(status, code) -> None:
    from tensorboard.plugins.hparams import metadata

    opts = {"hparams": {"x": 1}, "metrics": {}, "start_time": 5.0, "end_time": None, "status": status}
    out = hparams.encode(desc(Kind.HPARAMS, options=opts))
    assert len(out) == 3  # no metrics, no scalars
    end = metadata.parse_session_end_info_plugin_data(out[2].metadata.plugin_data.content)
    assert (end.status, end.end_time_secs) == (code, 0.0)
    exp = metadata.parse_experiment_plugin_data(out[0].metadata.plugin_data.content)
    assert not exp.hparam_infos[0].HasField("domain_discrete") and not exp.hparam_infos[0].HasField("domain_interval")


def test_hparams_read_by_tensorboards_plugin(tmp_path) -> None:
    """Two runs, each its own session: TensorBoard lists both groups with their
    hparams and the last value of each metric scalar."""
    from google.protobuf import json_format
    from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

    items = []
    for run, lr, acc in (("a", 0.1, 0.5), ("b", 0.01, 0.75)):
        opts = dict(HP_OPTIONS, hparams={**HP_OPTIONS["hparams"], "lr": lr}, metrics={"accuracy": acc}, group_name="")
        items += [(e, 7) for e in hparams.encode(desc(Kind.HPARAMS, "_hparams_", run=run, step=7, options=opts))]
    write_logdir(str(tmp_path), items)

    context = backend_context.Context(tb_context(str(tmp_path)))
    # TensorBoard 2.13 (the newest for Python 3.8) takes no request here; later ones do.
    extra = (
        [api_pb2.GetExperimentRequest()] if "request" in inspect.signature(get_experiment.Handler).parameters else []
    )
    exp = get_experiment.Handler(request_context(), context, "", *extra).run()
    assert sorted(i.name for i in exp.hparam_infos) == ["bn", "layers", "lr", "opt"]
    assert [m.name.tag for m in exp.metric_infos] == ["accuracy"]

    request = json_format.Parse(
        json.dumps(
            {
                "startIndex": 0,
                "sliceSize": 10,
                "allowedStatuses": ALL_STATUSES,
                "colParams": [{"metric": {"tag": "accuracy"}}, {"hparam": "lr"}],
            }
        ),
        api_pb2.ListSessionGroupsRequest(),
    )
    response = list_session_groups.Handler(request_context(), context, "", request).run()
    groups = {g.name: g for g in response.session_groups}
    assert sorted(groups) == ["a", "b"]  # an empty group_name: each session its own group
    b = groups["b"]
    assert b.hparams["lr"].number_value == 0.01 and b.hparams["opt"].string_value == "sgd"
    (metric,) = b.metric_values
    assert (metric.name.tag, metric.training_step) == ("accuracy", 7)
    assert metric.value == pytest.approx(0.75)
    (session,) = b.sessions
    assert (session.status, session.start_time_secs, session.end_time_secs) == (api_pb2.STATUS_SUCCESS, 100.0, 250.0)


@pytest.mark.parametrize(
    "start,end,tags",
    [
        (True, False, ["_hparams_/experiment", "_hparams_/session_start_info"]),
        (False, True, ["_hparams_/session_end_info"]),
        (False, False, []),
    ],
)
def test_hparams_start_and_end_options_choose_the_values(start, end, tags) -> None:
    opts = {**HP_OPTIONS, "start": start, "end": end}
    out = hparams.encode(desc(Kind.HPARAMS, "_hparams_", options=opts))
    assert [e.value.tag for e in out] == [*tags, "accuracy", "loss"]


def session_groups(logdir: str, metric: str = "accuracy") -> dict[str, Any]:
    """The HParams tab's session groups, from TensorBoard's own plugin backend."""
    from google.protobuf import json_format
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    context = backend_context.Context(tb_context(logdir))
    request = json_format.Parse(
        json.dumps(
            {
                "startIndex": 0,
                "sliceSize": 10,
                "allowedStatuses": ALL_STATUSES,
                "colParams": [{"metric": {"tag": metric}}],
            }
        ),
        api_pb2.ListSessionGroupsRequest(),
    )
    return {
        g.name: g for g in list_session_groups.Handler(request_context(), context, "", request).run().session_groups
    }


@pytest.mark.parametrize("first", ["RUNNING", None])
def test_a_later_add_hparams_ends_the_session(tmp_path, first) -> None:
    """Issue 15, defect 3: TensorBoard keeps a run's first session end, so a RUNNING end
    written by the first call could never become SUCCESS.  A RUNNING call writes no end
    (the status reads Unknown), the first SUCCESS/FAILURE call writes it, and the
    HParams tab shows it, with the last metric value.  ``first=None``: no status call
    before; a later call with the same status only updates the metrics."""
    from tensorboard.plugins.hparams import api_pb2

    from mxsidecar import SidecarWriter

    logdir = str(tmp_path)
    hp = {"lr": 0.1, "opt": "sgd"}
    with SidecarWriter(logdir) as sw:
        if first is not None:
            sw.add_hparams(hp, {"accuracy": 0.0}, global_step=0, status=first)
            sw.flush()
            ((session,),) = [g.sessions for g in session_groups(logdir).values()]
            assert session.status == api_pb2.STATUS_UNKNOWN and session.end_time_secs == 0
        sw.add_hparams(dict(hp), {"accuracy": 0.5}, global_step=5, status="SUCCESS")
        sw.add_hparams(hp, {"accuracy": 0.75}, global_step=9, status="SUCCESS")  # metrics only
    (group,) = session_groups(logdir).values()
    (session,) = group.sessions
    assert session.status == api_pb2.STATUS_SUCCESS and session.end_time_secs > 0
    assert group.hparams["lr"].number_value == 0.1
    (metric,) = group.metric_values
    assert (metric.training_step, metric.value) == (9, pytest.approx(0.75))


def test_a_dropped_add_hparams_declares_nothing(tmp_path, monkeypatch) -> None:
    """Under on_full='drop' the first call may be dropped (and counted): the session is
    then declared by the next call, not lost for the run."""
    from tensorboard.plugins.hparams import api_pb2

    from mxsidecar import SidecarWriter
    from mxsidecar.sidecar.faults import ENV

    logdir = str(tmp_path)
    # The sidecar holds the first item long enough that the one-item queue stays full.
    monkeypatch.setenv(ENV, json.dumps([{"at": "encode", "tag": "hold", "action": "sleep", "seconds": 2}]))
    with SidecarWriter(logdir, max_queue=1, on_full="drop") as sw:
        monkeypatch.delenv(ENV)
        sw.add_scalar("hold", 1.0, 0)
        sw.add_hparams({"lr": 0.1}, {"accuracy": 0.5}, status="RUNNING")
        assert sw.stats()["dropped"] == {"hparams": 1}
        sw.flush()
        sw.add_hparams({"lr": 0.2}, {"accuracy": 0.75}, global_step=3, status="SUCCESS")
    (group,) = session_groups(logdir).values()
    (session,) = group.sessions
    assert session.status == api_pb2.STATUS_SUCCESS and group.hparams["lr"].number_value == 0.2


def test_a_later_add_hparams_that_tensorboard_would_not_show_is_refused(tmp_path) -> None:
    """Different hparams, new metrics, other domains, or a second end: TensorBoard keeps
    the first, so each is a ValueError naming it, in the caller, nothing enqueued."""
    from mxsidecar import SidecarWriter

    with SidecarWriter(str(tmp_path)) as sw:
        sw.add_hparams({"lr": 0.1, "bn": True}, {"acc": 0.0}, {"bn": [True, False]}, status="RUNNING")
        seq = sw._pipe._seq
        for call, match in [
            (
                lambda: sw.add_hparams({"lr": 0.2, "bn": True}, {}),
                r"hparam_dict differs .* in 'lr' \(0.2; first call: 0.1\)",
            ),
            (lambda: sw.add_hparams({"lr": 0.1}, {}), r"in 'bn' \(missing; first call: True\)"),
            (lambda: sw.add_hparams({"lr": 0.1, "bn": 1}, {}), r"in 'bn' \(1; first call: True\)"),
            (lambda: sw.add_hparams({"lr": 0.1, "bn": True}, {"loss": 1.0}), "metric_dict names 'loss'"),
            (lambda: sw.add_hparams({"lr": 0.1, "bn": True}, {}, {"bn": [True]}), "hparam_domain_discrete differs"),
        ]:
            with pytest.raises(ValueError, match=match):
                call()
        assert sw._pipe._seq == seq
        sw.add_hparams({"lr": 0.1, "bn": True}, {"acc": 0.9}, status="FAILURE")
        for status in ("SUCCESS", "RUNNING"):
            with pytest.raises(
                ValueError, match=f"status='{status}', but this run's session already ended with 'FAILURE'"
            ):
                sw.add_hparams({"lr": 0.1, "bn": True}, {"acc": 0.9}, status=status)
        sw.add_hparams({"lr": 0.1, "bn": True}, {"acc": 0.95}, status="FAILURE")


@pytest.mark.parametrize(
    "change,match",
    [
        ({"hparams": {"lr": float("nan")}}, "NaN or Infinity"),
        ({"hparams": {"lr": float("inf")}}, "NaN or Infinity"),
        ({"hparams": {"lr": [1, 2]}}, "must be a bool, int, float or str"),
        ({"hparams": {"lr": None}}, "must be a bool, int, float or str"),
        ({"metrics": {"acc": "high"}}, "metric 'acc' must be an int or float"),
        ({"domains": {"nope": [1]}}, "not among the hparams"),
        ({"domains": {"opt": {"min": 0, "max": 1}}}, "cannot be an interval"),
        ({"domains": {"lr": {"min": 2.0, "max": 1.0}}}, "is empty"),
        ({"domains": {"lr": {"low": 2.0}}}, "needs exactly 'min' and 'max'"),
        ({"domains": {"lr": ["fast"]}}, "not of the hparam's type"),
        ({"domains": {"bn": [1, 0]}}, "not of the hparam's type"),  # a bool is not a number here
        ({"domains": {"opt": []}}, "is empty"),
        ({"domains": {"opt": "sgd"}}, "must be a list of values"),
        ({"status": "DONE"}, "status must be one of"),
    ],
)
def test_hparams_refusals_are_value_errors(change, match) -> None:
    opts = {**HP_OPTIONS, "domains": {}, **change}
    with pytest.raises(ValueError, match=match):
        hparams.encode(desc(Kind.HPARAMS, options=opts))


def test_check_hparams_raises_type_errors_for_the_training_thread() -> None:
    with pytest.raises(TypeError, match="hparam 'x'"):
        hparams.check_hparams({"x": object()}, {})
    with pytest.raises(TypeError, match="hparams must be a dict"):
        hparams.check_hparams([("x", 1)], {})  # type: ignore[arg-type]
    hparams.check_hparams(HP_OPTIONS["hparams"], HP_OPTIONS["metrics"], HP_OPTIONS["domains"])


# -- custom scalars ---------------------------------------------------------------

LAYOUT = {
    "Losses": {
        "train vs val": ["Multiline", ["loss/train", "loss/val.*"]],
        "loss band": ["Margin", ["loss/mean", "loss/lo", "loss/hi"]],
    },
    "Accuracy": {
        "all": ["multiline", ["acc/.*"]],
        "two bands": ["Margin", [["a", "a_lo", "a_hi"], ["b", "b_lo", "b_hi"]]],
    },
}


def test_custom_scalars_layout_round_trips_through_tensorboards_proto() -> None:
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata
    from tensorboard.util import tensor_util

    (enc,) = custom_scalars.encode(desc(Kind.CUSTOM_SCALARS, "ignored", run="r", options={"layout": LAYOUT}))
    value = tb_value(enc.value)
    assert value.tag == metadata.CONFIG_SUMMARY_TAG and enc.run == "r"
    assert enc.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME and enc.metadata.plugin_data.content == b""
    assert value.tensor.dtype == 7 and len(value.tensor.tensor_shape.dim) == 0  # DT_STRING scalar
    raw = tensor_util.make_ndarray(value.tensor).item()  # what the plugin does

    expected = layout_pb2.Layout(
        category=[
            layout_pb2.Category(
                title="Losses",
                chart=[
                    layout_pb2.Chart(
                        title="train vs val",
                        multiline=layout_pb2.MultilineChartContent(tag=["loss/train", "loss/val.*"]),
                    ),
                    layout_pb2.Chart(
                        title="loss band",
                        margin=layout_pb2.MarginChartContent(
                            series=[
                                layout_pb2.MarginChartContent.Series(
                                    value="loss/mean", lower="loss/lo", upper="loss/hi"
                                )
                            ]
                        ),
                    ),
                ],
            ),
            layout_pb2.Category(
                title="Accuracy",
                chart=[
                    layout_pb2.Chart(title="all", multiline=layout_pb2.MultilineChartContent(tag=["acc/.*"])),
                    layout_pb2.Chart(
                        title="two bands",
                        margin=layout_pb2.MarginChartContent(
                            series=[
                                layout_pb2.MarginChartContent.Series(value="a", lower="a_lo", upper="a_hi"),
                                layout_pb2.MarginChartContent.Series(value="b", lower="b_lo", upper="b_hi"),
                            ]
                        ),
                    ),
                ],
            ),
        ]
    )
    assert layout_pb2.Layout.FromString(raw) == expected


def test_custom_scalars_read_by_tensorboards_plugin(tmp_path) -> None:
    from tensorboard.plugins.custom_scalar import custom_scalars_plugin

    # two runs with layouts: TensorBoard merges the categories of the same title
    a = custom_scalars.encode(desc(Kind.CUSTOM_SCALARS, run="a", options={"layout": LAYOUT}))[0]
    b = custom_scalars.encode(
        desc(Kind.CUSTOM_SCALARS, run="b", options={"layout": {"Losses": {"x": ["Multiline", ["x"]]}}})
    )[0]
    write_logdir(str(tmp_path), [(a, 0), (b, 0)])
    plugin = custom_scalars_plugin.CustomScalarsPlugin(tb_context(str(tmp_path)))
    layout = json.loads(plugin.layout_impl(request_context(), ""))
    assert [c["title"] for c in layout["category"]] == ["Losses", "Accuracy"]
    assert [c["title"] for c in layout["category"][0]["chart"]] == ["train vs val", "loss band", "x"]


@pytest.mark.parametrize(
    "layout,exc,match",
    [
        (["Losses"], TypeError, "layout must be a dict"),
        ({}, ValueError, "no categories"),
        ({"L": []}, TypeError, "category 'L' must be a dict"),
        ({"L": {}}, ValueError, "category 'L' has no charts"),
        ({"L": {"c": "Multiline"}}, TypeError, "chart 'c' of category 'L' must be"),
        ({"L": {"c": ["Multiline", ["a"], "extra"]}}, TypeError, "chart 'c' of category 'L' must be"),
        ({"L": {"c": ["Histogram", ["a"]]}}, ValueError, "kind must be 'Multiline' or 'Margin'"),
        ({"L": {"c": ["Multiline", []]}}, ValueError, "non-empty list of tag regexes"),
        ({"L": {"c": ["Multiline", "loss"]}}, ValueError, "non-empty list of tag regexes"),
        ({"L": {"c": ["Multiline", ["loss("]]}}, ValueError, "tag regex 'loss\\(' is invalid"),
        ({"L": {"c": ["Margin", ["a", "b"]]}}, ValueError, "value_tag, lower_tag, upper_tag"),
        ({"L": {"c": ["Margin", [["a", "b", "c"], ["d"]]]}}, ValueError, "value_tag, lower_tag, upper_tag"),
        ({"L": {3: ["Multiline", ["a"]]}}, TypeError, "chart titles must be strings"),
    ],
)
def test_check_layout_names_what_is_wrong(layout, exc, match) -> None:
    with pytest.raises(exc, match=match):
        custom_scalars.check_layout(layout)
    with pytest.raises(ValueError, match=match):  # the sidecar's side: always a ValueError
        custom_scalars.encode(desc(Kind.CUSTOM_SCALARS, options={"layout": layout}))


def test_custom_scalars_without_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="layout must be a dict"):
        custom_scalars.encode(desc(Kind.CUSTOM_SCALARS, options=None))


# -- graphs -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def mx() -> Any:
    return pytest.importorskip("mxnet")


def conv_net(mx: Any) -> Any:
    data = mx.sym.var("data")
    x = mx.sym.Convolution(data, kernel=(3, 3), num_filter=8, name="conv0")
    x = mx.sym.BatchNorm(x, name="bn0")
    x = mx.sym.Activation(x, act_type="relu", name="relu0")
    x = mx.sym.FullyConnected(mx.sym.flatten(x, name="flat0"), num_hidden=10, name="fc0")
    return mx.sym.SoftmaxOutput(x, name="softmax")


def writer_shapes(sym: Any, **inputs: tuple[int, ...]) -> dict[str, list[int]]:
    """The shapes option as SidecarWriter.add_graph builds it (keys from list_outputs)."""
    internals = sym.get_internals()
    _, shapes, _ = internals.infer_shape_partial(**inputs)
    return {name: list(s) for name, s in zip(internals.list_outputs(), shapes) if s}


def nodes_of(g: Any) -> dict[str, Any]:
    return {n.name: n for n in g.node}


def check_tensorboard_can_show(graph_bytes: bytes) -> Any:
    """TensorBoard's server side (parse, trim large attrs, text form) plus what its
    browser needs: unique names, inputs naming nodes, shapes parseable."""
    from google.protobuf import text_format
    from tensorboard.backend import process_graph
    from tensorboard.compat.proto import graph_pb2 as tb_graph

    g = tb_graph.GraphDef.FromString(graph_bytes)
    process_graph.prepare_graph_for_ui(g, limit_attr_size=1024, large_attrs_key="_too_large_attrs")
    assert text_format.Parse(str(g), tb_graph.GraphDef()) == g
    names = [n.name for n in g.node]
    assert len(names) == len(set(names)) and names
    for n in g.node:
        for inp in n.input:
            src, _, index = inp.partition(":")
            assert src in names and (index == "" or index.isdigit()), inp
        if "_output_shapes" in n.attr:
            assert all(s.unknown_rank or all(d.size >= -1 for d in s.dim) for s in n.attr["_output_shapes"].list.shape)
    return g


def test_graph_of_a_symbol(mx) -> None:
    sym = conv_net(mx)
    shapes = writer_shapes(sym, data=(2, 3, 8, 8))
    d = desc(Kind.GRAPH, "graph", text=sym.tojson(), options={"shapes": shapes})
    g = check_tensorboard_can_show(graph.encode_graph(d))
    nodes = nodes_of(g)
    assert len(g.node) == len(json.loads(sym.tojson())["nodes"]) == 16
    assert sorted(nodes) == sorted(
        [
            "data",
            "conv0", "conv0/conv0_weight", "conv0/conv0_bias",
            "bn0", "bn0/bn0_gamma", "bn0/bn0_beta", "bn0/bn0_moving_mean", "bn0/bn0_moving_var",
            "relu0", "flat0",
            "fc0", "fc0/fc0_weight", "fc0/fc0_bias",
            "softmax_label", "softmax",
        ]
    )  # fmt: skip
    assert nodes["conv0"].op == "Convolution" and nodes["softmax"].op == "SoftmaxOutput"
    assert nodes["data"].op == nodes["conv0/conv0_weight"].op == nodes["softmax_label"].op == "Variable"
    assert list(nodes["conv0"].input) == ["data", "conv0/conv0_weight", "conv0/conv0_bias"]
    assert list(nodes["bn0"].input) == [
        "conv0",
        "bn0/bn0_gamma",
        "bn0/bn0_beta",
        "bn0/bn0_moving_mean",
        "bn0/bn0_moving_var",
    ]
    assert list(nodes["softmax"].input) == ["fc0", "softmax_label"]
    assert nodes["conv0"].attr["kernel"].s == b"(3, 3)" and nodes["conv0"].attr["num_filter"].s == b"8"
    assert nodes["relu0"].attr["act_type"].s == b"relu"
    assert nodes["bn0/bn0_moving_mean"].attr["__init__"].s == b"['zero', {}]"

    def dims(name: str) -> list[list[int]]:
        return [[d.size for d in s.dim] for s in nodes[name].attr["_output_shapes"].list.shape]

    assert dims("data") == [[2, 3, 8, 8]]
    assert dims("conv0") == [[2, 8, 6, 6]] and dims("conv0/conv0_weight") == [[8, 3, 3, 3]]
    assert dims("fc0") == [[2, 10]] and dims("softmax_label") == [[2]]


def test_graph_of_a_hybridized_gluon_net(mx) -> None:
    from mxnet.gluon import nn

    net = nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(nn.Conv2D(4, 3), nn.BatchNorm(), nn.Activation("relu"), nn.Dense(5))
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 3, 6, 6)))
    sym = net._cached_graph[1]
    g = check_tensorboard_can_show(graph.encode_graph(desc(Kind.GRAPH, text=sym.tojson())))
    nodes = nodes_of(g)
    assert len(g.node) == 13
    ops = {n.name: n.op for n in g.node if n.op != "Variable"}
    assert ops == {
        "net_conv0_fwd": "Convolution",
        "net_batchnorm0_fwd": "BatchNorm",
        "net_relu0_fwd": "Activation",
        "net_dense0_fwd": "FullyConnected",
    }
    assert list(nodes["net_conv0_fwd"].input) == [
        "data",
        "net_conv0_fwd/net_conv0_weight",
        "net_conv0_fwd/net_conv0_bias",
    ]
    scoped = sorted(n for n in nodes if "/" in n)
    assert len(scoped) == 8 and all(n.split("/")[0].endswith("_fwd") for n in scoped)
    assert "net_batchnorm0_fwd/net_batchnorm0_running_var" in nodes
    assert nodes["net_dense0_fwd/net_dense0_weight"].attr["__shape__"].s == b"(5, 0)"
    assert "_output_shapes" not in nodes["data"].attr

    # net(sym.var) gives the same structure, and the writer's shapes label it
    sym2 = net(mx.sym.var("data"))
    shapes = writer_shapes(sym2, data=(1, 3, 6, 6))
    g2 = check_tensorboard_can_show(
        graph.encode_graph(desc(Kind.GRAPH, text=sym2.tojson(), options={"shapes": shapes}))
    )
    assert sorted(nodes_of(g2)) == sorted(nodes)
    dense = nodes_of(g2)["net_dense0_fwd"].attr["_output_shapes"].list.shape
    assert [[d.size for d in s.dim] for s in dense] == [[1, 5]]


def test_graph_multi_output_and_shared_variables(mx) -> None:
    data = mx.sym.var("data")
    shared = mx.sym.var("fc_shared_weight")
    parts = mx.sym.split(data, num_outputs=3, axis=1, name="sp")
    a = mx.sym.FullyConnected(parts[0], weight=shared, no_bias=True, num_hidden=4, name="fc_shared")
    b = mx.sym.FullyConnected(parts[2], weight=shared, no_bias=True, num_hidden=4, name="fc_other")
    out = a + b
    shapes = writer_shapes(out, data=(2, 6))
    g = check_tensorboard_can_show(graph.graph_pb(out.tojson(), shapes).SerializeToString())
    nodes = nodes_of(g)
    # read by two operators: no scope, whatever its name says
    assert "fc_shared_weight" in nodes
    assert list(nodes["fc_shared"].input) == ["sp", "fc_shared_weight"]
    assert list(nodes["fc_other"].input) == ["sp:2", "fc_shared_weight"]
    sp_shapes = nodes["sp"].attr["_output_shapes"].list.shape
    assert [[d.size for d in s.dim] for s in sp_shapes] == [[2, 2]] * 3


def test_graph_rule_edge_cases() -> None:
    nodes = [
        {"op": "null", "name": "x", "inputs": []},
        {"op": "null", "name": "op_w", "inputs": []},
        {"op": "null", "name": "dup", "inputs": []},
        {"op": "Foo", "name": "op", "attrs": {"k": "v"}, "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
        {"op": "Bar", "name": "dup", "param": {"old": "1"}, "attr": {"user": "2"}, "inputs": [[3, 1, 0]]},
    ]
    shapes = {"x": [[3], []], "op_output1": [3, 4], "dup": [-1, 2]}
    g = graph.graph_pb(json.dumps({"nodes": nodes, "arg_nodes": [0, 1, 2], "heads": [[4, 0, 0]]}), shapes)
    check_tensorboard_can_show(g.SerializeToString())
    assert [n.name for n in g.node] == ["x", "op/op_w", "dup", "op", "dup_1"]  # 'dup' is not prefixed by 'op'
    assert list(g.node[4].input) == ["op:1"]
    assert {k: v.s for k, v in g.node[4].attr.items() if k != "_output_shapes"} == {"old": b"1", "user": b"2"}
    x_shapes = g.node[0].attr["_output_shapes"].list.shape
    assert [[d.size for d in s.dim] for s in x_shapes] == [[3], []]
    op_shapes = g.node[3].attr["_output_shapes"].list.shape
    assert op_shapes[0].unknown_rank and [d.size for d in op_shapes[1].dim] == [3, 4]
    assert [d.size for d in g.node[2].attr["_output_shapes"].list.shape[0].dim] == [-1, 2]


def test_graph_text_form_parses_with_quotes_and_backslashes() -> None:
    # TensorBoard's graphs plugin sends str(graph) to the browser; protobuf 5.26-6.30's upb
    # prints bytes fields unescaped, so a '"' or '\\' written as is breaks that text there.
    nodes = [{"op": "Foo", "name": "op", "attrs": {"init": '["zero", {}]', "path": "a\\b\\n"}, "inputs": []}]
    g = graph.graph_pb(json.dumps({"nodes": nodes, "arg_nodes": [], "heads": [[0, 0, 0]]}))
    assert g.node[0].attr["init"].s == b"['zero', {}]" and g.node[0].attr["path"].s == b"a/b/n"
    check_tensorboard_can_show(g.SerializeToString())  # str(g) parses back, on the protobuf under test


def test_graph_read_by_tensorboards_plugin(tmp_path, mx) -> None:
    from tensorboard.plugins.graph import graphs_plugin

    sym = conv_net(mx)
    ef = EventFile(str(tmp_path / "run"), wall_time=1.0, pid=os.getpid(), index=0)
    graph_def = graph.encode_graph(desc(Kind.GRAPH, text=sym.tojson()))
    ef.append(event_pb2.Event(wall_time=2.0, graph_def=graph_def).SerializeToString())
    ef.close()
    plugin = graphs_plugin.GraphsPlugin(tb_context(str(tmp_path)))
    body, mime = plugin.graph_impl(request_context(), "run", None, False, "", 1024, "_too_large_attrs")
    assert mime == "text/x-protobuf"
    assert 'name: "conv0/conv0_weight"' in body and 'op: "SoftmaxOutput"' in body


@pytest.mark.parametrize(
    "text,shapes,match",
    [
        ("{not json", None, "not an MXNet symbol's JSON"),
        ('{"nodes": []}', None, "no 'nodes' list"),
        ('{"nodes": [{"name": "a"}]}', None, "node 0 of the symbol's JSON"),
        ('{"nodes": [{"op": "x", "name": "a", "inputs": [[5, 0, 0]]}]}', None, "naming no node"),
        ('{"nodes": [{"op": "null", "name": "a", "inputs": []}]}', {"a": ["big"]}, "shape of 'a'"),
        ('{"nodes": [{"op": "null", "name": "a", "inputs": []}]}', {"a": [[1], 2]}, "shape of 'a'"),
    ],
)
def test_graph_refuses_what_is_not_a_symbol(text, shapes, match) -> None:
    with pytest.raises(ValueError, match=match):
        graph.encode_graph(desc(Kind.GRAPH, text=text, options={"shapes": shapes} if shapes else None))


def test_encoders_do_not_import_mxnet() -> None:
    import subprocess

    code = (
        "import sys; import mxsidecar.sidecar.encoders.graph, mxsidecar.sidecar.encoders.hparams, "
        "mxsidecar.sidecar.encoders.pr_curve, mxsidecar.sidecar.encoders.custom_scalars; "
        "print(any(m.split('.')[0] == 'mxnet' for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.bool_, np.int64])
@pytest.mark.parametrize("n", [129, 201, 10_000])
def test_pr_curve_integer_predictions(tb_pr_table, dtype, n) -> None:
    """Predictions of 0 and 1 as integers, past 128 thresholds: numpy 2 (NEP 50) refuses
    int8 * 128, numpy 1 widened it.  The table equals TensorBoard's for the same values
    as floats (TensorBoard's own ``pb`` hits the same numpy 2 error with int8)."""
    rng = np.random.default_rng(5)
    labels = rng.random(300) < 0.5
    pred = (rng.random(300) < 0.6).astype(dtype)
    np.testing.assert_array_equal(our_pr_table(labels, pred, n), tb_pr_table(labels, pred.astype(np.float64), n))
