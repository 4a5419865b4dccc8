"""Histograms: TensorBoard's buckets computed in the data's dtype, every bins option,
read back through TensorBoard's own histogram migration."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import event_files, load_multiplexer, read_events
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mxsidecar import SidecarWriter
from mxsidecar.sidecar.encoders import histogram as histogram_encoder
from mxsidecar.sidecar.encoders.histogram import DBL_MAX, TF_LIMITS, histogram_pb, tf_bucket_index

pytestmark = pytest.mark.timeout(120)


def test_tf_limits_are_tensorflows() -> None:
    assert len(TF_LIMITS) == 1549 and TF_LIMITS[774] == 0.0
    assert TF_LIMITS[775] == 1e-12 and TF_LIMITS[-1] < 1e20 <= TF_LIMITS[-1] * 1.1
    np.testing.assert_array_equal(TF_LIMITS[:774], -TF_LIMITS[775:][::-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bucket_index_equals_binary_search_on_edges(dtype) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(200_000) * np.exp(rng.uniform(-35, 50, 200_000))).astype(dtype)
    # exactly on limits, on both sides of them, zeros of both signs, the extremes
    lim = TF_LIMITS.astype(dtype)
    x = np.concatenate([x, lim, np.nextafter(lim, dtype(np.inf)), np.nextafter(lim, dtype(-np.inf)), [0.0, -0.0]])
    x = x[np.isfinite(x)].astype(dtype)
    np.testing.assert_array_equal(tf_bucket_index(x), np.searchsorted(lim, x, side="right"))


def test_float32_bucket_table_equals_binary_search_on_edges() -> None:
    """float32's bucket comes from a table over the top bits of each value, with an
    exact search for prefixes a limit cuts: on and around every limit, subnormals,
    zeros and the extremes, it is the search's answer."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(200_000) * np.exp(rng.uniform(-80, 80, 200_000))).astype(np.float32)
    lim = TF_LIMITS.astype(np.float32)
    near = [np.nextafter(lim, np.float32(s)) for s in (np.inf, -np.inf)]
    near += [np.nextafter(n, np.float32(s)) for n, s in zip(near, (np.inf, -np.inf))]  # two ulps away
    tiny = np.array([1e-45, -1e-45, 1e-40, -1e-40, 1.2e-38, np.finfo(np.float32).max, -np.finfo(np.float32).max])
    x = np.concatenate([x, lim, *near, tiny.astype(np.float32), np.float32([0.0, -0.0])]).astype(np.float32)
    x = x[np.isfinite(x)]
    np.testing.assert_array_equal(histogram_encoder._float32_bucket_index(x), np.searchsorted(lim, x, side="right"))


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 300), elements=st.floats(-1e30, 1e30).map(lambda f: float(np.float32(f)))))
def test_default_histogram_invariants(x) -> None:
    proto, nonfinite = histogram_pb(x)
    assert nonfinite == 0
    assert proto.num == x.size and sum(proto.bucket) == x.size
    assert (proto.min, proto.max) == (float(x.min()), float(x.max()))
    assert proto.sum == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-9, abs=1e-6)
    assert proto.bucket[0] > 0 and proto.bucket[-1] > 0  # empty tails trimmed
    empty = [c == 0 for c in proto.bucket]
    assert not any(a and b for a, b in zip(empty, empty[1:]))  # empty runs collapsed
    assert list(proto.bucket_limit) == sorted(proto.bucket_limit)
    assert proto.bucket_limit[-1] >= proto.max or proto.bucket_limit[-1] == DBL_MAX


def test_counts_match_numpy_over_the_same_limits() -> None:
    x = np.random.default_rng(2).standard_normal(50_000).astype(np.float32)
    proto, _ = histogram_pb(x)
    lim = TF_LIMITS.astype(np.float32).astype(np.float64)
    ref = np.bincount(np.searchsorted(lim, x.astype(np.float64), side="right"), minlength=len(lim) + 1)
    by_limit = dict(zip(np.append(lim, DBL_MAX), ref))
    assert len(proto.bucket_limit) == len(proto.bucket)
    for limit, count in zip(proto.bucket_limit, proto.bucket):
        if count:
            assert by_limit[limit] == count


def reference_histogram(values: np.ndarray) -> tuple[list[float], list[float], int, float, float]:
    """The default histogram the slow, obvious way: finite values only, one binary search
    each over the limits in the data's dtype, then TensorFlow's EncodeToProto rule in
    plain Python (trim empty ends, keep only the last bucket of each empty run)."""
    x = values.reshape(-1)
    work = np.float32 if x.dtype in (np.float16, np.float32) else np.float64
    x = x.astype(work)
    finite = x[np.isfinite(x)]
    lim = TF_LIMITS.astype(work)
    counts = np.bincount(np.searchsorted(lim, finite, side="right"), minlength=len(lim) + 1).tolist()
    limits = np.append(lim.astype(np.float64), DBL_MAX).tolist()
    filled = [i for i, c in enumerate(counts) if c]
    keep = [i for i in range(filled[0], filled[-1] + 1) if counts[i] or counts[i + 1]]
    return [limits[i] for i in keep], [float(counts[i]) for i in keep], x.size - finite.size, finite.min(), finite.max()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.bool_])
@pytest.mark.parametrize("n", [1, 7, histogram_encoder.SMALL, histogram_encoder.SMALL + 1, 70_000])
@pytest.mark.parametrize("spread", [0.0, 1.0, 30.0])
def test_every_path_gives_the_reference_histogram(dtype, n: int, spread: float) -> None:
    """Small arrays (one binary search each), large ones (the float32 table or the log,
    in chunks), few filled buckets (collapsed in Python) or many (in numpy), with and
    without non-finite values (found from min and max): all the reference's answer."""
    rng = np.random.default_rng(n + int(spread))
    x = rng.standard_normal(n) * np.exp(rng.uniform(-spread, spread, n))
    if dtype == np.int32:
        x = np.clip(x * 1000, -(2**31), 2**31 - 1)
    with np.errstate(over="ignore"):  # float16: past 65504 is inf, a non-finite value like any
        x = x.astype(dtype)
    cases = [x]
    if np.issubdtype(dtype, np.floating) and n > 1:
        y = x.copy()
        y[:: max(2, n // 5)] = np.nan
        y[1] = np.inf
        z = x.copy()
        z[0] = -np.inf  # an infinity alone: min shows it
        cases += [y, z]
    for values in cases:
        proto, nonfinite = histogram_pb(values)
        limits, counts, ref_nonfinite, lo, hi = reference_histogram(values)
        assert (list(proto.bucket_limit), list(proto.bucket)) == (limits, counts)
        assert nonfinite == ref_nonfinite and (proto.min, proto.max) == (float(lo), float(hi))
        assert proto.num == values.size - ref_nonfinite


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [histogram_encoder.SMALL, 70_000])
def test_limits_zeros_and_extremes_give_the_reference_histogram(dtype, n: int) -> None:
    """Values exactly on limits and one ulp either side, both zeros, values below the
    smallest limit and past the largest (1e20), on both paths (up to SMALL values, and
    the table or the log above it)."""
    lim = TF_LIMITS.astype(dtype)
    special = np.concatenate(
        [
            lim,
            np.nextafter(lim, dtype(np.inf)),
            np.nextafter(lim, dtype(-np.inf)),
            [0.0, -0.0, 1e-13, -1e-13, 3e20, -3e20],
        ]
    ).astype(dtype)
    x = np.resize(np.random.default_rng(5).permutation(special), n)
    proto, nonfinite = histogram_pb(x)
    limits, counts, ref_nonfinite, lo, hi = reference_histogram(x)
    assert (list(proto.bucket_limit), list(proto.bucket)) == (limits, counts)
    assert nonfinite == ref_nonfinite == 0 and (proto.min, proto.max) == (float(lo), float(hi))


@pytest.mark.parametrize("values", [np.array([], np.float32), np.array([np.nan, np.inf, -np.inf], np.float32)])
def test_nothing_finite_is_refused(values) -> None:
    with pytest.raises(ValueError, match=f"all {values.size} values are NaN or Inf; nothing to draw"):
        histogram_pb(values)


def test_int_bins_edges_and_rules() -> None:
    x = np.arange(100, dtype=np.float64)
    proto, _ = histogram_pb(x, 10)
    assert list(proto.bucket) == [10.0] * 10 and proto.bucket_limit[-1] == 99.0
    proto, _ = histogram_pb(x, [10.0, 20.0, 50.0])
    # values below and above the edges keep buckets of their own: nothing vanishes
    assert sum(proto.bucket) == 100 and proto.bucket[0] == 10 and proto.bucket[-1] == 49
    proto, _ = histogram_pb(np.full(5, 3.0), 4)  # a constant still draws
    assert sum(proto.bucket) == 5
    for rule in ("auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt"):
        proto, _ = histogram_pb(x, rule)
        assert sum(proto.bucket) == 100


@pytest.mark.parametrize(
    "values, bins",
    [([1e8, 1e8], 5), ([1.0, 1.0000001], 5), ([16777216.0, 16777218.0], 3), ([1.0, 2.0, 2.5], 4)],
)
def test_int_bins_of_narrow_float32_ranges(values, bins) -> None:
    # numpy built these edges in float32, where they collapsed: numpy 2 raised "Cannot create 1
    # finite-sized bins" in the sidecar for an input the caller had accepted. The judge is
    # numpy's own histogram of the same values in float64.
    x = np.array(values, np.float32)
    proto, _ = histogram_pb(x, bins)
    lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(x.astype(np.float64), bins=bins, range=(lo, hi))
    ours = dict(zip(proto.bucket_limit, proto.bucket))
    assert len(ours) == len(proto.bucket_limit)  # no repeated limit
    assert set(ours) <= set(edges[1:].tolist())  # every limit is one of numpy's edges
    # every non-empty bucket of numpy's is ours (empty ones are trimmed or merged)
    assert {e: c for e, c in zip(edges[1:].tolist(), counts.tolist()) if c} == {e: c for e, c in ours.items() if c}


def test_rules_are_capped(tmp_path) -> None:
    """tensorboardX#1: 'auto' over a few huge outliers asked numpy for 66 billion bins."""
    x = np.concatenate([np.zeros(10_000), [1e15]])
    proto, _ = histogram_pb(x, "fd")
    assert len(proto.bucket) <= 10_001 and sum(proto.bucket) == x.size


def test_nonfinite_values_left_out_and_counted(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        with pytest.warns(RuntimeWarning, match="2 NaN/Inf"):
            sw.add_histogram("h", np.array([1.0, np.nan, 2.0, np.inf]), 0)
            sw.flush()
        sw.add_histogram("h", np.array([1.0, np.nan]), 1)  # warned once per tag
        with pytest.raises(ValueError, match="finite"):  # numpy: checked in the caller
            sw.add_histogram("all_nan", np.array([np.nan, np.nan]), 0)
        mx = pytest.importorskip("mxnet")
        with pytest.warns(RuntimeWarning, match="all_nan.*was not written"):
            sw.add_histogram("all_nan", mx.nd.array([np.nan, np.nan]), 0)  # only the sidecar can see it
            sw.flush()
        stats = sw.stats()
    assert stats["sidecar"]["nonfinite"] == {"h": 3}
    assert stats["rejected"] == 1  # nothing to draw: refused, reported
    histos = [v.histo for e in read_events(event_files(logdir)[0]) for v in e.summary.value]
    assert [(h.num, h.min, h.max) for h in histos] == [(2, 1.0, 2.0), (1, 1.0, 1.0)]


def test_read_back_by_tensorboards_histogram_plugin(tmp_path) -> None:
    from tensorboard.plugins.histogram import metadata as hmeta
    from tensorboard.util import tensor_util

    logdir = str(tmp_path)
    x = np.random.default_rng(3).normal(5.0, 2.0, 10_000).astype(np.float32)
    with SidecarWriter(logdir) as sw:
        for step, bins in enumerate(["default", 30, "auto", [0.0, 5.0, 10.0]]):
            sw.add_histogram("w", x, step, bins=bins)
        sw.add_histogram("ints", np.arange(10, dtype=np.int64), 0)
    mux = load_multiplexer(logdir)
    assert set(mux.PluginRunToTagToContent(hmeta.PLUGIN_NAME)["."]) == {"w", "ints"}
    for event in mux.Tensors(".", "w"):
        t = tensor_util.make_ndarray(event.tensor_proto)  # [k, 3]: left, right, count
        assert t.shape[1] == 3 and t[:, 2].sum() == x.size
        assert t[0, 0] == pytest.approx(float(x.min())) and t[-1, 1] == pytest.approx(float(x.max()))


def test_bad_bins(tmp_path) -> None:
    with SidecarWriter(str(tmp_path)) as sw:
        for bins, exc in [
            ("wide", ValueError),
            (0, ValueError),
            (10**6, ValueError),
            ([1.0], ValueError),
            ([2.0, 1.0], ValueError),
            ([0.0, np.nan], ValueError),
            (1.5, TypeError),
            (True, TypeError),
        ]:
            with pytest.raises(exc, match="bins"):
                sw.add_histogram("h", np.ones(3), 0, bins=bins)
        with pytest.raises(ValueError, match="values"):
            sw.add_histogram("h", np.ones(0), 0)
        with pytest.raises(TypeError, match="values"):
            sw.add_histogram("h", np.array(["a"]), 0)
        with pytest.raises(TypeError, match="values"):
            sw.add_histogram("h", {"a": 1}, 0)
        assert sw._pipe._seq == 0
