"""Histograms: the legacy ``HistogramProto``, which both of TensorBoard's loaders read.

Contract (TensorBoard ``plugins/histogram/metadata.py``): plugin ``histograms``,
content ``HistogramPluginData{version: 0}``.  We write ``Value.histo`` rather than the
``[k, 3]`` tensor because it carries exact ``min``/``max``/``num``/``sum``/
``sum_squares``; TensorBoard converts it on load (``data_compat.py``), using ``min``
as the first left edge and ``max`` as the last right edge, so empty tails are
trimmed here (mxboard's 1,548 buckets spanning +-1e20 are what render as one spike).

Bucketing happens in the data's own dtype (float32 stays float32: converting a 1M
array to float64 first costs more than the histogram).  ``'default'`` uses
TensorFlow's bucket limits (+-1e-12 * 1.1**k up to 1e20, and 0) with TensorFlow's
``upper_bound`` rule, bucket ``i`` being ``[limit[i-1], limit[i])``.  Up to
``SMALL`` values, the index is one binary search over the 1,549 limits; above it,
float32 reads it from a table over each value's top bits and other dtypes compute it
with one logarithm, and only values a limit may cut (a table entry of -1, or a log
within rounding distance of an integer) are placed by ``searchsorted``.  Runs of
empty buckets are collapsed into one, as TensorFlow's ``EncodeToProto`` does.

NaN and +-Inf are left out of the buckets and of min/max/num/sum; their count is
returned to the sidecar, which reports it per tag in ``stats()``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...formats.proto import histogram_pb2, plugin_histogram_pb2, summary_pb2
from ...wire.descriptors import Descriptor
from . import Encoded

PLUGIN_NAME = "histograms"
PROTO_VERSION = 0
MAX_BINS = 10_000  # the writer enforces it for ints and edges; numpy's rules are capped here
DBL_MAX = float(np.finfo(np.float64).max)


def create_summary_metadata() -> summary_pb2.SummaryMetadata:
    content = plugin_histogram_pb2.HistogramPluginData(version=PROTO_VERSION)
    md = summary_pb2.SummaryMetadata()
    md.plugin_data.plugin_name = PLUGIN_NAME
    md.plugin_data.content = content.SerializeToString()
    return md


METADATA = create_summary_metadata()


def _tf_positive_limits() -> np.ndarray[Any, Any]:
    # TensorFlow's histogram.cc: for (v = 1e-12; v < 1e20; v *= 1.1)
    out, v = [], 1e-12
    while v < 1e20:
        out.append(v)
        v *= 1.1
    return np.array(out)


_POS = _tf_positive_limits()  # 774 limits
NPOS = len(_POS)
TF_LIMITS = np.concatenate([-_POS[::-1], [0.0], _POS])  # 1549 limits, ascending
ZERO_INDEX = NPOS  # TF_LIMITS[ZERO_INDEX] == 0
_LOG_GROWTH = math.log(1.1)
_FEW_BUCKETS = 32  # filled buckets up to which _collapse works on Python lists
# Below this many values, one binary search per value (np.searchsorted over the 1,549
# limits) costs less than the float32 table's fixed passes; the result is the same.
SMALL = 2048
CHUNK = 1 << 16  # elements per pass: 256 KB of float32, several temporaries fit in L2
_EDGE_SLACK = 1e-3  # in log-bucket units; float32 log() of values up to 1e20 errs by ~5e-5


def _work_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    if dtype == np.float32 or dtype == np.float64:
        return dtype
    if dtype == np.float16:
        return np.dtype(np.float32)  # numpy's float16 arithmetic is slow and coarse
    return np.dtype(np.float64)  # ints and bools


_LIMIT_CACHE: dict[Any, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}


def _limits_pair(dtype: Any) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """TF_LIMITS rounded to ``dtype`` (what values are compared with), and the same as
    float64 with DBL_MAX appended (what is reported): built once per dtype, since a
    training step logs many small histograms and this was a fixed cost of each."""
    pair = _LIMIT_CACHE.get(dtype)
    if pair is None:
        rounded = TF_LIMITS.astype(dtype)
        pair = (rounded, np.append(rounded.astype(np.float64), DBL_MAX))
        _LIMIT_CACHE[dtype] = pair
    return pair


def _limits(dtype: Any) -> np.ndarray[Any, Any]:
    return _limits_pair(dtype)[0]


def _reported_limits(dtype: Any) -> np.ndarray[Any, Any]:
    return _limits_pair(dtype)[1]


def tf_bucket_index(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``searchsorted(TF_LIMITS, x, side='right')`` for finite ``x`` (see _tf_bucket_index)."""
    with np.errstate(all="ignore"):
        return _tf_bucket_index(x)


def _tf_bucket_index(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``searchsorted(TF_LIMITS, x, side='right')`` for finite ``x``, without the search.

    With ``n = #{p_j <= |x|} = floor(log(|x| / 1e-12) / log 1.1) + 1`` (clamped to
    [0, NPOS]) over the positive limits ``p_j``, the index is ``NPOS + 1 + n`` for
    ``x >= 0`` and ``NPOS - n`` for ``x < 0``: both are ``NPOS + 1/2 +- (n + 1/2)``,
    computed in place in the data's dtype (a handful of passes, no int64 temporaries).
    Values whose log lands within ``_EDGE_SLACK`` of an integer may sit on either side
    of a limit after rounding; those few are placed by an exact search.
    """
    # The caller silences floating-point warnings: |x| near 1e38 overflows to inf and
    # 0 gives log(0) = -inf, both clamped below.
    t = x.dtype.type
    k = np.abs(x)
    k *= t(1e12)
    np.log(k, out=k)
    k *= t(1.0 / _LOG_GROWTH)
    n = np.floor(k)
    k -= n  # fractional part; NaN where x == 0 (-inf - -inf), never "unsure"
    unsure = np.flatnonzero((k < _EDGE_SLACK) | (k > 1 - _EDGE_SLACK))
    n += 1
    np.maximum(n, 0, out=n)  # |x| < 1e-12, and -inf for x == 0
    np.minimum(n, NPOS, out=n)
    n += t(0.5)
    np.copysign(n, x + t(0), out=n)  # + 0 turns -0.0 into +0.0, which counts as >= 0
    n += t(NPOS + 0.5)
    idx: np.ndarray[Any, Any] = n.astype(np.intp)
    if unsure.size:
        idx[unsure] = np.searchsorted(_limits(x.dtype), x[unsure], side="right")
    return idx


# float32 data: the bucket of a value read from a table indexed by the top 20 bits of
# its representation (sign, exponent, 11 mantissa bits).  Every float with a given
# prefix lies in one interval 2**-11 wide relative to its value, far narrower than a
# bucket (10 %), so most prefixes fall in one bucket: the table holds that bucket, or
# -1 for the few prefixes a limit cuts (about 0.5 % of values), which are placed by an
# exact search.  Same result as searchsorted, and fewer numpy passes than
# _tf_bucket_index (one shift, one gather): about 12 % off a 1M-value histogram.
_F32_SHIFT = 12
_f32_table: list[np.ndarray[Any, Any]] = []  # 2 MB, built on the first float32 histogram (~0.1 s)


def _float32_table() -> np.ndarray[Any, Any]:
    if not _f32_table:
        limits = _limits(np.dtype(np.float32))
        prefix = np.arange(1 << (32 - _F32_SHIFT), dtype=np.uint32) << _F32_SHIFT
        first = prefix.view(np.float32)  # the prefix's first and last float: for a
        last = (prefix | ((1 << _F32_SHIFT) - 1)).view(np.float32)  # negative sign, its ends swap
        with np.errstate(invalid="ignore"):
            a = np.searchsorted(limits, first, side="right")
            b = np.searchsorted(limits, last, side="right")
        table = np.where(a == b, a, -1).astype(np.int16)  # NaN/Inf prefixes never get here (filtered)
        _f32_table.append(table)
    return _f32_table[0]


def _float32_bucket_index(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``searchsorted(_limits(float32), x, side='right')`` for finite float32 ``x``."""
    # The prefix is made as intp: indexing with a uint32 array would first copy it to
    # intp inside numpy (a pass and an allocation more; 14 % of the 16 heavy-profile
    # histograms, perf/bench_kinds.py's histogram_encode_heavy_step).
    idx: np.ndarray[Any, Any] = _float32_table()[np.right_shift(x.view(np.uint32), _F32_SHIFT, dtype=np.intp)]
    unsure = np.flatnonzero(idx < 0)
    if unsure.size:
        idx[unsure] = np.searchsorted(_limits(x.dtype), x[unsure], side="right")
    return idx


def _collapse(limits: np.ndarray[Any, Any], counts: np.ndarray[Any, Any]) -> tuple[list[float], list[float]]:
    """Trim empty buckets at both ends; merge each run of empty buckets into one (the
    run's last bucket, whose limit is the next filled bucket's left edge)."""
    nz = np.flatnonzero(counts)
    if nz.size == 0:
        return [], []
    if nz.size <= _FEW_BUCKETS:
        # A training step logs many small histograms with a handful of filled buckets:
        # in Python, a few list operations instead of a dozen numpy calls (~20 us).
        index: Any = []
        filled = nz.tolist()
        for prev, i in zip(filled, filled[1:]):
            index.append(prev)
            if i - prev > 1:
                index.append(i - 1)
        index.append(filled[-1])
    else:
        gaps = nz[1:][np.diff(nz) > 1] - 1  # the last bucket of each empty run
        index = np.sort(np.concatenate((nz, gaps)))
    return limits[index].tolist(), counts[index].astype(np.float64).tolist()


def _rule_bins(x: np.ndarray[Any, Any], rule: str, lo: float, hi: float) -> int:
    """Number of equal-width buckets numpy's ``rule`` asks for, capped at MAX_BINS.

    np.histogram_bin_edges would first build every edge it asks for (tensorboardX#1:
    66 billion), so the width is taken from numpy's selector and bounded here.
    """
    if hi <= lo:
        return 1
    try:
        from numpy.lib._histograms_impl import _hist_bin_selectors  # type: ignore[import-not-found]  # numpy >= 2
    except ImportError:
        from numpy.lib.histograms import _hist_bin_selectors  # type: ignore[attr-defined]
    with np.errstate(all="ignore"):
        width = float(_hist_bin_selectors[rule](x, (lo, hi)))
    if not width > 0 or not math.isfinite(width):
        return 1
    n = hi / width - lo / width  # not (hi - lo) / width: that difference can overflow
    return int(min(MAX_BINS, max(1, math.ceil(n)))) if math.isfinite(n) else MAX_BINS


def _equal_width(
    x: np.ndarray[Any, Any], bins: int, lo: float, hi: float
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Counts and right edges of ``bins`` equal buckets over [lo, hi].

    np.histogram's fast path divides by ``hi - lo``, which overflows for a range
    spanning most of float64 and underflows for a subnormal one (it then raises
    IndexError); such ranges get explicit edges built without the subtraction.
    """
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    span = hi - lo
    if math.isfinite(span) and span > np.finfo(np.float64).tiny * bins:
        # In float64: np.histogram builds its edges in the data's dtype, so float32 data
        # of a narrow range (1e8 +- 0.5, or 1.0 to its next float in 5 buckets) got equal
        # edges, which numpy 2 refuses ("Cannot create 1 finite-sized bins") and numpy 1
        # reported as repeated bucket limits. Not the default buckets' path: no cost there.
        with np.errstate(all="ignore"):
            counts, edges = np.histogram(x.astype(np.float64, copy=False), bins=bins, range=(lo, hi))
        return counts, edges[1:].astype(np.float64)
    t = np.arange(bins + 1, dtype=np.float64) / bins
    edges = np.unique(lo * (1 - t) + hi * t)  # each term within range: no overflow
    edges[0], edges[-1] = lo, hi
    if edges.size < 2:  # a range too narrow to split: one bucket
        edges = np.array([lo, hi])
    counts = np.histogram(x.astype(np.float64), bins=edges)[0]
    return counts, edges[1:]


def histogram_pb(values: np.ndarray[Any, Any], bins: Any = "default") -> tuple[histogram_pb2.HistogramProto, int]:
    """The HistogramProto of ``values`` (any shape, real dtype) and its non-finite count.

    Raises ValueError when no value is finite (nothing to draw).  Floating-point
    warnings are silenced once here (overflow to inf and log(0) are expected and
    handled), not per pass: a training step logs many small histograms.
    """
    with np.errstate(all="ignore"):
        return _histogram_pb(values, bins)


def _histogram_pb(values: np.ndarray[Any, Any], bins: Any) -> tuple[histogram_pb2.HistogramProto, int]:
    x = values.reshape(-1)
    x = x.astype(_work_dtype(x.dtype), copy=False)
    nonfinite = 0
    # min and max first: NaN propagates through both and an infinity is one of them, so
    # finite ends mean every value is finite, and the isfinite pass (and its mask) is
    # only paid for the rare array that needs it.
    lo, hi = (float(x.min()), float(x.max())) if x.size else (math.nan, math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        finite = np.isfinite(x)
        nonfinite = int(x.size - np.count_nonzero(finite))
        x = x[finite]
        if x.size == 0:
            raise ValueError(f"all {nonfinite} values are NaN or Inf; nothing to draw")
        lo, hi = float(x.min()), float(x.max())
    default = isinstance(bins, str) and bins == "default"
    if default and x.size <= SMALL:
        c64 = x.astype(np.float64)
        index = np.searchsorted(_limits(x.dtype), x, side="right")
        few = np.bincount(index, minlength=len(TF_LIMITS) + 1)
        proto = _proto(lo, hi, x.size, float(c64.sum()), float(c64 @ c64), _reported_limits(x.dtype), few)
        return proto, nonfinite
    counts = np.zeros(len(TF_LIMITS) + 1, dtype=np.int64) if default else None
    # One pass in cache-sized chunks: moments in float64 (exact sums without an
    # 8-byte copy of the whole array) and, for the default buckets, the bucket index.
    # Whole-array temporaries would each be a fresh multi-MB allocation, i.e. page
    # faults, and a trip through memory per numpy pass; 64k elements stay in L2.
    total = total_sq = 0.0
    for i in range(0, x.size, CHUNK):
        c = x[i : i + CHUNK]
        c64 = c.astype(np.float64)
        total += float(c64.sum())
        total_sq += float(c64 @ c64)  # squares past 1e154 are inf: so is the true sum
        if counts is not None:
            index = _float32_bucket_index(c) if c.dtype == np.float32 else _tf_bucket_index(c)
            counts += np.bincount(index, minlength=len(counts))

    if counts is not None:
        limits = _reported_limits(x.dtype)
    else:
        if isinstance(bins, str):
            bins = _rule_bins(x, bins, lo, hi)
        if isinstance(bins, int):
            counts, limits = _equal_width(x, bins, lo, hi)
        else:
            edges = np.asarray(bins, dtype=np.float64)
            inner = np.histogram(x, bins=edges)[0]
            # Values outside the edges are not dropped: they get a bucket of their own
            # on each side, so num, min and max still describe every finite value.
            # Compared as float64 arrays (as np.histogram does): against a Python float,
            # numpy 1.x would round the edge to float32 data's own precision first.
            below = int(np.count_nonzero(x < edges[:1]))
            above = int(np.count_nonzero(x > edges[-1:]))
            counts = np.concatenate([[below], inner, [above]])
            limits = np.concatenate([edges, [max(hi, edges[-1])]])
    return _proto(lo, hi, x.size, total, total_sq, limits, counts), nonfinite


def _proto(
    lo: float, hi: float, num: int, total: float, total_sq: float, limits: np.ndarray[Any, Any], counts: Any
) -> histogram_pb2.HistogramProto:
    bucket_limit, bucket = _collapse(limits, counts)
    return histogram_pb2.HistogramProto(
        min=lo, max=hi, num=float(num), sum=total, sum_squares=total_sq, bucket_limit=bucket_limit, bucket=bucket
    )


def encode(desc: Descriptor, data: Any) -> list[Encoded]:
    bins = (desc.options or {}).get("bins", "default")
    proto, nonfinite = histogram_pb(data, bins)
    value = summary_pb2.Summary.Value(tag=desc.tag)
    value.histo.CopyFrom(proto)
    return [Encoded(desc.run, value, METADATA, {"nonfinite": nonfinite} if nonfinite else None)]
