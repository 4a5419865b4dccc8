"""Zero-sync capture: NDArrays reach the sidecar without the caller waiting on MXNet's engine.

The pending-computation tests are deterministic: a custom operator holds the engine
at a gate the test opens, so "the call returned before the value existed" is a fact
of the engine's order, not a wall-clock threshold.  A call that synced would hang at
the gate, and pytest-timeout turns that into a failure.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from conftest import event_files, load_multiplexer, read_events, tensor_values, wait_until

from mxsidecar import SidecarWriter

mx = pytest.importorskip("mxnet")
pytestmark = pytest.mark.timeout(90)

_GATES: dict[int, tuple[threading.Event, threading.Event, bool]] = {}


class _Gate(mx.operator.CustomOp):
    """Identity that waits for the test to open its gate, then marks that it ran."""

    def __init__(self, key: int) -> None:
        super().__init__()
        self.key = key

    def forward(self, is_train, req, in_data, out_data, aux):
        opened, ran, fail = _GATES[self.key]
        assert opened.wait(60), "gate never opened"
        ran.set()
        if fail:
            raise RuntimeError("injected failure in the user's computation")
        self.assign(out_data[0], req[0], in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0])


@mx.operator.register("mxsidecar_test_gate")
class _GateProp(mx.operator.CustomOpProp):
    def __init__(self, key: str) -> None:
        super().__init__(need_top_grad=True)
        self.key = int(key)

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def infer_type(self, in_type):
        return in_type, [in_type[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Gate(self.key)


def gated(x, fail: bool = False):
    """``x`` behind a gate: returns (y, open, ran). ``y`` cannot be computed before open.set()."""
    key = len(_GATES)
    opened, ran = threading.Event(), threading.Event()
    _GATES[key] = (opened, ran, fail)
    return mx.nd.Custom(x, key=str(key), op_type="mxsidecar_test_gate"), opened, ran


def test_pending_scalar_is_logged_without_waiting(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        y, opened, ran = gated(mx.nd.array([2.5]))
        loss = y * 2  # still pending behind the gate
        sw.add_scalar("loss", loss, 7)  # would deadlock here if it synced
        assert not ran.is_set()  # engine order: the value did not exist when the call returned
        opened.set()
    assert tensor_values(load_multiplexer(logdir), ".", "loss") == [(7, pytest.approx(5.0))]


def test_slow_dot_chain_returns_before_it_finishes(tmp_path) -> None:
    """A real computation of ~0.5 s or more; a marker behind it shows it was unfinished."""
    logdir = str(tmp_path)
    a = mx.nd.random.uniform(shape=(1500, 1500), dtype="float32") / 1500
    a.wait_to_read()
    with SidecarWriter(logdir) as sw:
        x = a
        for _ in range(40):
            x = mx.nd.dot(x, a)
        marked, opened, ran = gated(x)  # runs only once the chain is done
        opened.set()
        sw.add_histogram("chain", x, 1)
        sw.add_scalar("chain/mean", x.mean(), 1)
        unfinished_at_return = not ran.is_set()
        expected = x.asnumpy()  # the test may sync; the writer may not
        marked.wait_to_read()
    assert unfinished_at_return
    mux = load_multiplexer(logdir)
    (ev,) = mux.Tensors(".", "chain")
    assert [float(v) for _, v in tensor_values(mux, ".", "chain/mean")] == [
        pytest.approx(float(expected.mean()), rel=1e-5)
    ]
    (path,) = event_files(logdir)
    histo = next(v.histo for e in read_events(path) for v in e.summary.value if v.tag == "chain")
    assert (histo.num, histo.min, histo.max) == (expected.size, float(expected.min()), float(expected.max()))
    assert ev.step == 1


def test_value_is_the_one_at_call_time(tmp_path) -> None:
    """The engine orders our copy before later in-place writes to the source."""
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        w = mx.nd.ones((10,))
        y, opened, _ = gated(w)
        sw.add_histogram("w", y, 0)
        y += 100  # queued on the engine after our copy of y
        opened.set()
    (path,) = event_files(logdir)
    histo = next(v.histo for e in read_events(path) for v in e.summary.value)
    assert (histo.min, histo.max, histo.num) == (1.0, 1.0, 10)


def test_order_of_fast_and_slow_values_is_kept(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        slow, opened, _ = gated(mx.nd.array([0.0]))
        sw.add_scalar("v", slow, 0)
        for i in range(1, 6):
            sw.add_scalar("v", float(i), i)  # fast values queue behind the slow one
        sw.add_text("t", "after", 6)
        sw.add_scalar("v", mx.nd.array([7.0]), 7)
        opened.set()
    (path,) = event_files(logdir)
    assert [e.step for e in read_events(path) if e.HasField("summary")] == list(range(8))


def test_training_thread_never_syncs(tmp_path, monkeypatch) -> None:
    main = threading.main_thread()

    def guard(cls, name):
        real = cls.__dict__[name]

        def patched(self, *a, **k):
            if threading.current_thread() is main:
                raise AssertionError(f"NDArray.{name} called on the training thread")
            return real(self, *a, **k)

        return patched

    logdir = str(tmp_path)
    net = mx.gluon.nn.Dense(4)
    net.initialize()
    x = mx.nd.random.uniform(shape=(8, 3))
    # float() on an mx.nd.NDArray without __float__ raises by itself; patch what exists.
    for cls in (mx.nd.NDArray, mx.np.ndarray):
        for name in ("asnumpy", "asscalar", "item", "wait_to_read", "__float__", "__int__", "__bool__", "__index__"):
            if name in cls.__dict__:
                monkeypatch.setattr(cls, name, guard(cls, name))
    monkeypatch.setattr(mx.nd, "waitall", lambda: (_ for _ in ()).throw(AssertionError("waitall")))
    with SidecarWriter(logdir) as sw:
        for step in range(20):
            with mx.autograd.record():
                loss = (net(x) ** 2).mean()
            loss.backward()
            sw.add_scalar("loss", loss, step)
            for name, p in net.collect_params().items():
                sw.add_histogram(name + "/grad", p.grad(), step)
                sw.add_histogram(name, p.data(), step)
    monkeypatch.undo()
    mux = load_multiplexer(logdir)
    assert [s for s, _ in tensor_values(mux, ".", "loss")] == list(range(20))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "uint8", "int8", "int32", "int64"])
def test_every_mxnet_dtype(tmp_path, dtype) -> None:
    logdir = str(tmp_path)
    data = (np.arange(-50, 150) % 120).astype(dtype).reshape(10, 20)
    with SidecarWriter(logdir) as sw:
        sw.add_histogram("h", mx.nd.array(data, dtype=dtype), 0)
        sw.add_scalar("s", mx.nd.array(data[:1, :1], dtype=dtype), 0)
    (path,) = event_files(logdir)
    values = {v.tag: v for e in read_events(path) for v in e.summary.value}
    h = values["h"].histo
    ref = data.astype(np.float64)
    assert (h.num, h.min, h.max) == (ref.size, ref.min(), ref.max())
    assert h.sum == pytest.approx(ref.sum()) and h.sum_squares == pytest.approx((ref**2).sum())
    assert sum(h.bucket) == ref.size
    assert values["s"].tensor.float_val[0] == pytest.approx(float(ref[0, 0]))


def test_mx_np_and_sparse_arrays(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        sw.add_histogram("np", mx.np.array([1.0, 2.0, 3.0]), 0)
        sw.add_histogram("csr", mx.nd.array([[0, 1], [2, 0]]).tostype("csr"), 0)
        with pytest.raises(ValueError, match="set_np"):
            sw.add_scalar("np0d", mx.np.array(4.0), 0)  # MXNet itself cannot copy it here
        with mx.util.np_shape(True):
            sw.add_scalar("np0d", mx.np.array(4.0), 0)
    (path,) = event_files(logdir)
    values = {v.tag: v for e in read_events(path) for v in e.summary.value}
    assert (values["np"].histo.num, values["np"].histo.sum) == (3, 6.0)
    assert (values["csr"].histo.num, values["csr"].histo.sum) == (4, 3.0)
    assert values["np0d"].tensor.float_val[0] == 4.0


def test_failed_computation_is_skipped_and_reported(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        bad, opened, _ = gated(mx.nd.array([1.0]), fail=True)
        with pytest.warns(RuntimeWarning, match="scalar .x. was not written: MXNetError"):
            sw.add_scalar("x", bad, 0)
            sw.add_scalar("x", 2.0, 1)
            opened.set()
            sw.flush()
        assert sw.stats()["rejected"] == 1
        sw.add_scalar("x", mx.nd.array([3.0]), 2)  # the writer goes on
    mux = load_multiplexer(logdir)
    assert [(s, float(v)) for s, v in tensor_values(mux, ".", "x")] == [(1, 2.0), (2, 3.0)]


def test_nan_in_an_ndarray_image_is_rejected_counted_and_the_writer_goes_on(tmp_path) -> None:
    """The README's example of a value only the sidecar can check: the caller cannot
    look inside an NDArray without a sync, so the sidecar refuses the image whole,
    counts it in stats()['rejected'], and the trainer warns."""
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        bad = mx.nd.array(np.full((3, 4, 4), np.nan, np.float32))
        with pytest.warns(RuntimeWarning, match="image .img. was not written"):
            sw.add_image("img", bad, 0)  # accepted in the caller: it cannot see the NaN
            sw.flush()
        sw.add_image("img", mx.nd.ones((3, 4, 4)), 1)
        sw.flush()
        assert sw.stats()["rejected"] == 1
    steps = [e.step for p in event_files(logdir) for e in read_events(p) for v in e.summary.value if v.tag == "img"]
    assert steps == [1]


def test_steady_state_reuses_spans_and_wrappers(tmp_path) -> None:
    with SidecarWriter(str(tmp_path)) as sw:
        arrays = [mx.nd.random.uniform(shape=(256, 256)) for _ in range(3)]
        offsets = set()
        for step in range(30):
            for i, a in enumerate(arrays):
                sw.add_histogram(f"w{i}", a, step)
            offsets |= {off for _, off in sw._pipe._spans}
            sw.flush()
        assert len(sw._pipe.engine._wrappers) <= 3  # one per recurring (offset, shape, dtype)
        assert len(offsets) <= 3
        assert sw.stats()["arena_used_bytes"] == 0


def test_scalar_ndarray_must_hold_one_element(tmp_path) -> None:
    with SidecarWriter(str(tmp_path)) as sw:
        with pytest.raises(ValueError, match="value must hold exactly one element"):
            sw.add_scalar("x", mx.nd.ones((2,)), 0)
        with mx.util.np_shape(True), pytest.raises(ValueError, match="values must have at least 1"):
            sw.add_histogram("x", mx.np.ones((0,)), 0)
        assert sw._pipe._seq == 0


@pytest.mark.skipif(mx.context.num_gpus() == 0, reason="no GPU on this machine")
def test_gpu_arrays_are_copied_by_the_engine(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        g = mx.nd.arange(1000, ctx=mx.gpu(0)).reshape(10, 100)
        sw.add_histogram("gpu", g, 0)
        sw.add_scalar("gpu/sum", g.sum(), 0)
    (path,) = event_files(logdir)
    values = {v.tag: v for e in read_events(path) for v in e.summary.value}
    assert (values["gpu"].histo.num, values["gpu"].histo.max) == (1000, 999.0)
    assert values["gpu/sum"].tensor.float_val[0] == pytest.approx(499500.0)


def test_without_mxnet_numpy_works_and_lookalikes_are_refused(tmp_path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["mxnet"] = None  # import mxnet now raises ImportError
        import numpy as np
        from mxsidecar import SidecarWriter

        class FakeNDArray:
            shape = (3,)
            def copyto(self, other): pass
            def wait_to_read(self): pass
            context = "cpu(0)"

        with SidecarWriter({str(tmp_path)!r}) as sw:
            sw.add_histogram("h", np.arange(10.0), 0)
            sw.add_scalar("s", np.float32(1.5), 0)
            for call in (lambda: sw.add_histogram("h", FakeNDArray(), 1), lambda: sw.add_scalar("s", FakeNDArray(), 1)):
                try:
                    call()
                except TypeError as exc:
                    assert "mxnet" in str(exc), exc
                else:
                    raise SystemExit("no TypeError")
        assert "mxnet" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert wait_until(lambda: len(event_files(str(tmp_path))) == 1)
