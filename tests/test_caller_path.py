"""The short caller path for NDArrays (issue 12): metadata read and engine push through
MXNet's C API with the GIL kept, one engine push per array, and everything the longer
path guaranteed: the value at call time, order, failures of the user's computation, a
sidecar that dies with items in flight.

Deterministic like ``test_capture.py``: a gate (a custom operator the test opens) holds
the logged values pending, so "the copy was pushed before the in-place write" and
"the items were still in flight" are facts of the engine's order, not of timing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from typing import Any

import numpy as np
import pytest
from conftest import event_files, load_multiplexer, read_events, tensor_values, wait_until
from test_capture import gated

from mxsidecar import SidecarError, SidecarWriter
from mxsidecar.training.capture import ndarray_info

mx = pytest.importorskip("mxnet")
pytestmark = pytest.mark.timeout(90)


def _arrays():
    out = [mx.nd.ones((1,), dtype=d) for d in ("float16", "float32", "float64", "uint8", "int8", "int32", "int64")]
    out += [mx.nd.zeros((3, 4)), mx.nd.zeros((2, 3, 4, 5), dtype="float64"), mx.nd.ones((7,), dtype="bool")]
    out += [mx.np.ones((2, 2)), mx.nd.array([[0, 1], [2, 0]]).tostype("csr"), mx.nd.ones((5,)).tostype("row_sparse")]
    return out


def test_describe_reads_what_mxnets_own_properties_say(tmp_path) -> None:
    """The C-API read (two calls, a dtype table) against NDArray.shape / .dtype."""
    with SidecarWriter(str(tmp_path)) as sw:
        sw.add_scalar("first", mx.nd.ones((1,)), 0)  # the engine capture exists from here on
        engine = sw._pipe.engine
        for x in _arrays():
            assert engine.describe(x) == ndarray_info(x), x
        with mx.util.np_shape(True):
            x = mx.np.array(4.0)
            assert engine.describe(x) == ndarray_info(x) == ((), "float32", 4, 1, True)
        with pytest.raises(ValueError, match="set_np"):
            engine.describe(mx.np.array(4.0))


def test_the_callers_c_calls_keep_the_gil_and_the_wait_releases_it(tmp_path) -> None:
    """Each call on the caller's path is a PyDLL function (the GIL kept: no other thread
    of the training process can take it inside add_*); the completion thread's wait is a
    CDLL one (it blocks on the engine, so it must let the training thread run)."""
    with SidecarWriter(str(tmp_path)) as sw:
        sw.add_scalar("x", mx.nd.ones((1,)), 0)
        api = sw._pipe.engine._api
        keeps = [api._get_shape, api._get_dtype, api._is_recording, api._set_recording, api._invoke]
        assert all(f._flags_ & ctypes._FUNCFLAG_PYTHONAPI for f in keeps)
        assert not api.wait_to_read._flags_ & ctypes._FUNCFLAG_PYTHONAPI


def test_autograd_is_paused_for_our_copy_and_restored(tmp_path) -> None:
    """Logging inside autograd.record() a value that requires a gradient: our copy is
    not recorded into the user's graph, and recording is on again after the call."""
    logdir = str(tmp_path)
    x = mx.nd.ones((3,))
    x.attach_grad()
    with SidecarWriter(logdir) as sw:
        with mx.autograd.record():
            y = (x * 2).sum()
            sw.add_scalar("y", y, 0)
            assert mx.autograd.is_recording()
        y.backward()
        assert x.grad.asnumpy().tolist() == [2.0, 2.0, 2.0]
        (wrapper,) = sw._pipe.engine._wrappers.values()
        with pytest.raises(mx.base.MXNetError):
            mx.autograd.get_symbol(wrapper)  # raises for an array no recorded op wrote
    assert tensor_values(load_multiplexer(logdir), ".", "y") == [(0, pytest.approx(6.0))]


def test_scalar_value_is_the_one_at_call_time(tmp_path) -> None:
    """An in-place write right after the call is ordered after our copy by the engine."""
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        y, opened, ran = gated(mx.nd.array([1.5]))
        try:
            sw.add_scalar("v", y, 0)
            y[:] = 100.0  # queued behind the gate, after the copy
            sw.add_histogram("h", y, 1)  # sees the write
            assert not ran.is_set()
        finally:
            opened.set()
    histo = scalar_then_histogram(logdir)
    assert (histo.min, histo.max) == (100.0, 100.0)


def scalar_then_histogram(logdir: str) -> Any:
    """The two values the gated tests log: scalar "v" read back by TensorBoard is the
    1.5 it held at call time; histogram "h" is returned for the test to check."""
    mux = load_multiplexer(logdir)
    assert tensor_values(mux, ".", "v") == [(0, pytest.approx(1.5))]
    (path,) = event_files(logdir)
    return next(v.histo for e in read_events(path) for v in e.summary.value if v.tag == "h")


def test_threads_logging_ndarrays_and_floats_keep_each_ones_order_and_values(tmp_path) -> None:
    logdir = str(tmp_path)
    n = 60

    def work(k: int, sw: SidecarWriter) -> None:
        x = mx.nd.zeros((1,))
        h = mx.nd.zeros((50,))
        for i in range(n):
            x[:] = float(i)  # the same array, rewritten: each call must log the value it saw
            sw.add_scalar(f"t{k}/nd", x, i)
            sw.add_scalar(f"t{k}/float", float(i), i)
            h[:] = float(i)
            sw.add_histogram(f"t{k}/h", h, i)

    with SidecarWriter(logdir, max_queue=10_000) as sw:
        # The completion thread sends in queue order, and the sidecar's progress frees
        # every span up to a seq: seqs must enter the queue in increasing order, or a
        # span could be freed (and overwritten) before the sidecar read it.
        put = sw._pipe.completion.put
        seqs: list[int] = []

        def recording_put(item):
            seqs.append(item[1])
            put(item)

        sw._pipe.completion.put = recording_put
        threads = [threading.Thread(target=work, args=(k, sw)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sw._pipe.completion.put = put
        assert seqs == list(range(seqs[0], seqs[0] + 4 * 3 * n))
    (path,) = event_files(logdir)
    seen: dict[str, list[tuple[int, float]]] = {}
    for e in read_events(path):
        for v in e.summary.value:
            value = v.histo.max if v.HasField("histo") else v.tensor.float_val[0]
            seen.setdefault(v.tag, []).append((e.step, value))
    assert len(seen) == 12
    for tag, got in seen.items():
        assert got == [(i, float(i)) for i in range(n)], tag


def test_a_failed_value_spoils_neither_its_span_nor_what_follows(tmp_path) -> None:
    """The failed copy's wrapper is dropped (poisoned): the next value of the same shape,
    in the same span, is written."""
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        bad, opened, _ = gated(mx.nd.ones((100,)), fail=True)
        with pytest.warns(RuntimeWarning, match="histogram .h. was not written: MXNetError"):
            sw.add_histogram("h", bad, 0)
            opened.set()
            sw.flush()
        ((key, failed),) = sw._pipe.engine._wrappers.items()
        for step in (1, 2):
            sw.add_histogram("h", mx.nd.ones((100,)) * step, step)
            sw.flush()
        assert list(sw._pipe.engine._wrappers) == [key]  # the same span and shape again...
        assert sw._pipe.engine._wrappers[key] is not failed  # ...in a new wrapper
        assert sw.stats()["rejected"] == 1
    (path,) = event_files(logdir)
    assert [(e.step, v.histo.max) for e in read_events(path) for v in e.summary.value] == [(1, 1.0), (2, 2.0)]


def test_sidecar_killed_with_ndarray_items_in_flight(tmp_path) -> None:
    """Invariant 8 on the short path: values still pending on the engine when the
    sidecar dies are counted in one explained error; nothing hangs, nothing leaks."""
    sw = SidecarWriter(str(tmp_path))
    sw.add_scalar("before", 1.0, 0)
    sw.flush()
    y, opened, ran = gated(mx.nd.array([3.0]))
    for i in range(3):
        sw.add_scalar("pending", y, i)
        sw.add_histogram("pending_h", y * 2, i)
    os.kill(sw.stats()["sidecar_pid"], signal.SIGKILL)
    assert wait_until(lambda: sw.stats()["last_error"] is not None)
    assert not ran.is_set()
    opened.set()
    with pytest.raises(SidecarError, match=r"SIGKILL.*6 logged items were not written"):
        sw.add_scalar("after", mx.nd.ones((1,)), 0)
    with pytest.raises(SidecarError):  # sticky: the same error, every call after it
        sw.add_histogram("after", np.ones(3), 0)
    sw.close()
    mux = load_multiplexer(str(tmp_path))
    assert tensor_values(mux, ".", "before") == [(0, pytest.approx(1.0))]


def test_an_mxnet_without_those_c_functions_falls_back_to_its_python_api(tmp_path, monkeypatch) -> None:
    """Another mxnet build may lack a C function the short path calls: the same
    captures then go through mxnet's own Python API, with the same guarantees."""
    from mxsidecar.training import capture

    def missing(mx):
        raise AttributeError("undefined symbol: MXNDArrayGetShapeEx")

    monkeypatch.setattr(capture, "_CApi", missing)
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        y, opened, ran = gated(mx.nd.array([1.5]))
        try:  # the gate opens whatever happens: a failed call must fail, not hang at exit
            sw.add_scalar("v", y, 0)
            y[:] = 100.0  # after our copy, in the engine's order
            sw.add_histogram("h", mx.nd.ones((10,), dtype="int8"), 0)
            assert isinstance(sw._pipe.engine._api, capture._PythonApi)
            assert not ran.is_set()
        finally:
            opened.set()
    histo = scalar_then_histogram(logdir)
    assert (histo.num, histo.min, histo.max) == (10, 1.0, 1.0)
