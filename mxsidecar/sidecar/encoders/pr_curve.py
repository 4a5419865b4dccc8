"""Precision-recall curves: the ``pr_curves`` plugin's ``[6, num_thresholds]`` tensor.

Contract (TensorBoard ``plugins/pr_curve/metadata.py``, ``summary.py``): plugin
``pr_curves``, content ``PrCurvePluginData{version: 0, num_thresholds}``, data class
TENSOR (what TensorBoard's loader assigns to this plugin), value a DT_FLOAT tensor of
shape ``[6, num_thresholds]`` whose rows are TP, FP, TN, FN, precision and recall at
the thresholds ``i / (num_thresholds - 1)``.

The numbers are those of TensorBoard's ``summary.pb`` (which needs TensorFlow, so it
cannot be called here): the bucket of a prediction is ``floor(pred * (n - 1))``
computed in the prediction's own dtype, counts are float64 sums of ``label * weight``
and ``(1 - label) * weight`` per bucket, reverse-cumulated, and precision and recall
divide by ``max(1e-7, ...)`` before the whole table is rounded to float32 once.
There is no cap on ``num_thresholds``: the 127 in mxboard, tensorboardX and PyTorch
is their own artifact; TensorBoard's default is 201.

Only the sidecar sees the values, so it refuses (ValueError) predictions that are NaN,
infinite or outside [0, 1] (TensorBoard would silently drop or misplace them), labels
other than 0/1, and weights that are negative or not finite (one NaN weight turns
every count into NaN, an empty plot).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ...formats.proto import plugin_pr_curve_pb2, summary_pb2, types_pb2
from ...wire.descriptors import Descriptor
from . import Encoded

PLUGIN_NAME = "pr_curves"
PROTO_VERSION = 0
DEFAULT_NUM_THRESHOLDS = 201  # TensorBoard's
MINIMUM_COUNT = 1e-7  # TensorBoard's _MINIMUM_COUNT: precision of an empty bucket is 0, not NaN

if TYPE_CHECKING:  # ndarray is subscriptable at run time only from numpy 1.22
    Array = np.ndarray[Any, Any]


@functools.lru_cache(maxsize=64)
def create_summary_metadata(num_thresholds: int) -> summary_pb2.SummaryMetadata:
    # Cached: a writer uses one or two threshold counts, and the proto is only read.
    content = plugin_pr_curve_pb2.PrCurvePluginData(version=PROTO_VERSION, num_thresholds=num_thresholds)
    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_TENSOR)
    md.plugin_data.plugin_name = PLUGIN_NAME
    md.plugin_data.content = content.SerializeToString()
    return md


def _check_values(labels: Array, predictions: Array, weights: Array | None) -> None:
    if predictions.dtype.kind not in "biuf":
        raise ValueError(f"predictions must be real numbers, not {predictions.dtype}")
    if predictions.size:
        # min/max propagate NaN, so two reductions check range and finiteness at once
        lo, hi = predictions.min(), predictions.max()
        if not (lo >= 0 and hi <= 1):
            bad = int(np.count_nonzero(~((predictions >= 0) & (predictions <= 1))))
            raise ValueError(f"{bad} of {predictions.size} predictions are NaN, infinite or outside [0, 1]")
    if labels.dtype != np.bool_:
        if labels.dtype.kind not in "iuf":
            raise ValueError(f"labels must be bool or 0/1 numbers, not {labels.dtype}")
        bad = int(np.count_nonzero((labels != 0) & (labels != 1)))
        if bad:
            raise ValueError(f"{bad} of {labels.size} labels are neither 0 nor 1")
    if weights is not None and weights.size:
        if weights.dtype.kind not in "biuf":
            raise ValueError(f"weights must be real numbers, not {weights.dtype}")
        lo, hi = weights.min(), weights.max()
        if not (lo >= 0 and hi < np.inf):
            bad = int(np.count_nonzero(~((weights >= 0) & (weights < np.inf))))
            raise ValueError(f"{bad} of {weights.size} weights are negative, NaN or infinite")


def compute_curve(labels: Array, predictions: Array, num_thresholds: int, weights: Array | None = None) -> Array:
    """The float32 ``[6, num_thresholds]`` table TensorBoard's ``summary.pb`` computes.

    Arrays may have any shape; they are flattened and must hold the same number of
    elements.  Raises ValueError for values TensorBoard could not draw.
    """
    if num_thresholds < 2:
        raise ValueError(f"num_thresholds must be at least 2, not {num_thresholds}")
    labels = np.asarray(labels).reshape(-1)
    predictions = np.asarray(predictions).reshape(-1)
    if weights is not None:
        weights = np.asarray(weights).reshape(-1)
    sizes = {labels.size, predictions.size} | ({weights.size} if weights is not None else set())
    if len(sizes) != 1:
        raise ValueError(f"labels, predictions and weights differ in size: {sorted(sizes)}")
    _check_values(labels, predictions, weights)

    if predictions.dtype.kind == "f" and float(predictions.dtype.type(num_thresholds - 1)) != num_thresholds - 1:
        # float16 beyond 2049 thresholds (float32 beyond 2**24 + 1): n - 1 itself rounds,
        # so 1.0 * (n - 1) could land past the last bucket; TensorBoard drops those.
        predictions = predictions.astype(np.float64)
    elif predictions.dtype.kind in "biu":
        # Integer predictions (0 or 1) times n - 1: numpy 1.x widened int8 by value,
        # numpy 2 (NEP 50) raises OverflowError at n > 128.  int64 gives the same
        # products on both.
        predictions = predictions.astype(np.int64)
    # Same expression as TensorBoard, so a float32 prediction lands in the bucket that
    # float32 arithmetic puts it in (float32(0.85) * 200 floors to 170, in float64 to 169).
    buckets = np.floor(predictions * (num_thresholds - 1)).astype(np.intp)
    float_labels = labels.astype(np.float64)
    if weights is None:
        # Integer counts are exact in float64, so this equals TensorBoard's weighted sums.
        tp_buckets = np.bincount(buckets, weights=float_labels, minlength=num_thresholds)
        fp_buckets = np.bincount(buckets, minlength=num_thresholds) - tp_buckets
    else:
        # np.histogram over integer buckets with range (0, n-1) and n bins is a bincount
        # (every bucket index sits at least 1/n away from a bin edge).
        tp_buckets = np.bincount(buckets, weights=float_labels * weights, minlength=num_thresholds)
        fp_buckets = np.bincount(buckets, weights=(1.0 - float_labels) * weights, minlength=num_thresholds)

    tp = np.cumsum(tp_buckets[::-1])[::-1]
    fp = np.cumsum(fp_buckets[::-1])[::-1]
    tn = fp[0] - fp
    fn = tp[0] - tp
    precision = tp / np.maximum(MINIMUM_COUNT, tp + fp)
    recall = tp / np.maximum(MINIMUM_COUNT, tp + fn)
    table: Array = np.stack((tp, fp, tn, fn, precision, recall)).astype(np.float32)
    return table


def pr_curve_pb(
    tag: str, labels: Array, predictions: Array, num_thresholds: int, weights: Array | None = None
) -> summary_pb2.Summary.Value:
    table = compute_curve(labels, predictions, num_thresholds, weights)
    v = summary_pb2.Summary.Value(tag=tag)
    v.tensor.dtype = types_pb2.DT_FLOAT
    v.tensor.tensor_shape.dim.add(size=6)
    v.tensor.tensor_shape.dim.add(size=num_thresholds)
    v.tensor.tensor_content = table.astype("<f4", copy=False).tobytes()
    return v


def encode(desc: Descriptor, data: dict[str, Array]) -> list[Encoded]:
    n = int((desc.options or {}).get("num_thresholds", DEFAULT_NUM_THRESHOLDS))
    value = pr_curve_pb(desc.tag, data["labels"], data["predictions"], n, data.get("weights"))
    return [Encoded(desc.run, value, create_summary_metadata(n))]
