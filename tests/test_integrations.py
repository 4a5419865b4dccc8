"""mxsidecar.integrations against real MXNet training loops (Module.fit, the Gluon
Estimator, executors' monitor callbacks), read back with TensorBoard's loader."""

from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import sys
import threading
import traceback
from collections import Counter, namedtuple
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import event_files, load_multiplexer, read_events, tensor_values

mx = pytest.importorskip("mxnet")
from mxnet.gluon.contrib.estimator import BatchEnd, EpochEnd, Estimator, TrainBegin, TrainEnd  # noqa: E402

from mxsidecar import SidecarWriter  # noqa: E402
from mxsidecar.integrations import (  # noqa: E402
    SidecarHandler,
    WriterMonitor,
    batch_end_callback,
    epoch_end_callback,
    eval_end_callback,
    log_params,
    monitor_to_writer,
)

pytestmark = pytest.mark.timeout(120)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 16
N_TRAIN = 64  # 4 batches per epoch
EPOCHS = 2


# -- helpers ---------------------------------------------------------------------------------


def synthetic(n: int = N_TRAIN, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 5)).astype(np.float32)
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.float32)


def mlp_symbol() -> Any:
    data = mx.sym.var("data")
    fc1 = mx.sym.FullyConnected(data, num_hidden=8, name="fc1")
    act = mx.sym.Activation(fc1, act_type="relu", name="relu1")  # may run in place on fc1's memory
    bn = mx.sym.BatchNorm(act, name="bn1")
    fc2 = mx.sym.FullyConnected(bn, num_hidden=2, name="fc2")
    return mx.sym.SoftmaxOutput(fc2, name="softmax")


def data_iter(seed: int = 0) -> Any:
    x, y = synthetic(seed=seed)
    return mx.io.NDArrayIter(x, y, batch_size=BATCH, label_name="softmax_label")


def histos(logdir: str) -> dict[tuple[str, int], Any]:
    """(tag, step) -> HistogramProto, from every event file (TensorBoard's Event proto)."""
    out = {}
    for path in event_files(logdir):
        for ev in read_events(path):
            for v in ev.summary.value:
                if v.HasField("histo"):
                    out[(v.tag, ev.step)] = v.histo
    return out


def tags(mux: Any, plugin: str) -> set[str]:
    return {t for run in mux.PluginRunToTagToContent(plugin).values() for t in run}


def steps(mux: Any, tag: str) -> list[int]:
    return [s for s, _ in tensor_values(mux, ".", tag)]


def scalars(mux: Any, tag: str) -> dict[int, float]:
    return {s: float(v) for s, v in tensor_values(mux, ".", tag)}


def assert_histo(h: Any, ref: np.ndarray) -> None:
    ref = ref.astype(np.float64).ravel()
    assert h.num == ref.size
    assert h.min == pytest.approx(ref.min(), rel=1e-5, abs=1e-6)
    assert h.max == pytest.approx(ref.max(), rel=1e-5, abs=1e-6)
    assert h.sum == pytest.approx(ref.sum(), rel=1e-4, abs=1e-4)


@pytest.fixture
def no_sync(monkeypatch):
    """A context manager: inside it, NDArray methods that wait on the engine raise on the
    main (training) thread, except when MXNet's own metric code (mxnet/metric.py) calls
    them: Module.fit and the Estimator update their metrics with asnumpy() every batch.
    It yields a Counter of those allowed calls."""
    main = threading.main_thread()
    metric_py = os.path.join("mxnet", "metric.py")

    def guard(cls, name, allowed):
        real = cls.__dict__[name]

        def patched(self, *a, **k):
            if threading.current_thread() is main:
                stack = traceback.extract_stack()[:-1]
                inside = [f for f in stack if f.filename.endswith(metric_py)]
                if not inside:
                    where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in stack[-6:])
                    raise AssertionError(f"NDArray.{name} called on the training thread: {where}")
                allowed[f"{name} in {inside[-1].name}"] += 1
            return real(self, *a, **k)

        return patched

    @contextlib.contextmanager
    def guarded() -> Iterator[Counter[str]]:
        allowed: Counter[str] = Counter()
        with monkeypatch.context() as m:
            for cls in (mx.nd.NDArray, mx.np.ndarray):
                for name in ("asnumpy", "asscalar", "item", "wait_to_read", "__float__", "__int__", "__bool__"):
                    if name in cls.__dict__:
                        m.setattr(cls, name, guard(cls, name, allowed))
            m.setattr(mx.nd, "waitall", lambda: (_ for _ in ()).throw(AssertionError("waitall")))
            yield allowed

    return guarded


class Recorder:
    """Module.fit callbacks that record, after ours, what MXNet's metrics reported."""

    def __init__(self, mod: Any) -> None:
        self.mod = mod
        self.batches: list[tuple[int, int, list[tuple[str, float]]]] = []
        self.epochs: dict[int, dict[str, np.ndarray]] = {}
        self.evals: dict[int, list[tuple[str, float]]] = {}

    def batch_end(self, param: Any) -> None:
        self.batches.append((param.epoch, param.nbatch, param.eval_metric.get_name_value()))

    def epoch_end(self, epoch: int, symbol: Any, arg_params: Any, aux_params: Any) -> None:
        values = {k: v.asnumpy() for k, v in {**arg_params, **aux_params}.items()}
        group = self.mod._exec_group
        for name, grads in zip(group.param_names, group.grad_arrays):
            values[name + "/grad"] = grads[0].asnumpy()
        self.epochs[epoch] = values

    def eval_end(self, param: Any) -> None:
        self.evals[param.epoch] = param.eval_metric.get_name_value()


# -- importing without mxnet, pure-Python step logic ---------------------------------------------


def test_import_does_not_load_mxnet() -> None:
    code = (
        "import sys; import mxsidecar.integrations as i\n"
        "class W:\n"
        "    def add_scalar(self, *a): pass\n"
        "    def add_histogram(self, *a): pass\n"
        "i.batch_end_callback(W()); i.eval_end_callback(W()); i.epoch_end_callback(W())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mxnet'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


class ListWriter:
    """A duck-typed writer: the integrations need add_scalar and add_histogram only."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, int]] = []

    def add_scalar(self, tag: str, value: Any, step: int | None = None) -> None:
        self.calls.append(("scalar", tag, value, step or 0))

    def add_histogram(self, tag: str, values: Any, step: int | None = None) -> None:
        self.calls.append(("histogram", tag, values, step or 0))


Param = namedtuple("Param", "epoch nbatch eval_metric locals")


class FixedMetric:
    def get_name_value(self) -> list[tuple[str, float]]:
        return [("accuracy", 0.5)]


def test_batch_steps_learned_from_first_epoch() -> None:
    w = ListWriter()
    cb = batch_end_callback(w, every=3)
    for epoch in range(3):
        for nbatch in range(5):
            cb(Param(epoch, nbatch, FixedMetric(), {}))
    assert cb.batches_per_epoch == 5 and cb.last_step == 14
    assert [c[3] for c in w.calls] == [0, 3, 6, 9, 12]
    assert {c[1] for c in w.calls} == {"train/accuracy"}


def test_resumed_fit_needs_batches_per_epoch() -> None:
    w = ListWriter()
    with pytest.raises(ValueError, match="batches_per_epoch"):
        batch_end_callback(w)(Param(3, 0, FixedMetric(), {}))
    cb = batch_end_callback(w, every=1, prefix="", batches_per_epoch=4)
    cb(Param(3, 1, FixedMetric(), {}))
    assert w.calls == [("scalar", "accuracy", 0.5, 13)]
    with pytest.warns(RuntimeWarning, match="overlap"):
        cb(Param(3, 4, FixedMetric(), {}))


def test_argument_checks() -> None:
    w = ListWriter()
    with pytest.raises(ValueError, match="every"):
        batch_end_callback(w, every=0)
    with pytest.raises(ValueError, match="grads=True needs the module"):
        epoch_end_callback(w, None, grads=True)
    with pytest.raises(ValueError, match="stat"):
        monitor_to_writer(w, stat="mean")
    with pytest.raises(ValueError, match="interval"):
        monitor_to_writer(w, interval=0)
    with pytest.raises(ValueError, match="log_every"):
        SidecarHandler(w, log_every=0)
    with pytest.raises(TypeError, match="prefix"):
        eval_end_callback(w, prefix=None)  # type: ignore[arg-type]


def test_classes_derive_from_mxnet_on_first_use() -> None:
    w = ListWriter()
    mon = monitor_to_writer(w)
    assert isinstance(mon, mx.mon.Monitor) and isinstance(mon, WriterMonitor)
    handler = SidecarHandler(w)
    assert all(isinstance(handler, c) for c in (TrainBegin, BatchEnd, EpochEnd, TrainEnd, SidecarHandler))

    class Mine(SidecarHandler):
        pass

    mine = Mine(w, log_every=5)
    assert isinstance(mine, Mine) and isinstance(mine, BatchEnd) and mine.log_every == 5
    assert type(Mine(w)) is type(mine)  # the derived class is made once
    assert not [a for a in dir(handler) if "metric" in a]  # the Estimator rejects such attributes


# -- Module.fit ------------------------------------------------------------------------------------


def test_module_fit_with_every_callback_and_the_monitor(tmp_path) -> None:
    logdir = str(tmp_path)
    mod = mx.mod.Module(mlp_symbol(), context=mx.cpu())
    rec = Recorder(mod)
    with SidecarWriter(logdir) as sw:
        batches = batch_end_callback(sw, every=1)
        mon = monitor_to_writer(sw, interval=2, pattern=r"fc1_output|relu1_output|fc2_weight$|fc2_weight_grad")
        norms = monitor_to_writer(sw, interval=3, pattern=r"fc1_weight$", stat="norm", prefix="norm/")
        mod.fit(
            data_iter(),
            eval_data=data_iter(seed=1),
            eval_metric=["acc", "ce"],
            optimizer="sgd",
            optimizer_params={"learning_rate": 0.5},
            initializer=mx.init.Xavier(),
            num_epoch=EPOCHS,
            monitor=mon,
            batch_end_callback=[batches, rec.batch_end],
            epoch_end_callback=[epoch_end_callback(sw, mod, grads=True, steps_from=batches), rec.epoch_end],
            eval_end_callback=[
                eval_end_callback(sw, steps_from=batches),
                eval_end_callback(sw, prefix="val_by_epoch"),
                rec.eval_end,
            ],
        )
        mod.install_monitor(norms)  # installing a second monitor replaces the first one's callback
        it = data_iter()
        for batch in it:
            norms.tic()
            mod.forward_backward(batch)
            mod.update()
            norms.toc_print()
        final = {k: v.asnumpy() for k, v in mod.get_params()[0].items()}

    mux = load_multiplexer(logdir)
    # Training metrics: every batch, global step = epoch * 4 + nbatch, MXNet's values.
    for name in ("accuracy", "cross-entropy"):
        got = scalars(mux, f"train/{name}")
        want = {epoch * 4 + nbatch: dict(nv)[name] for epoch, nbatch, nv in rec.batches}
        assert sorted(got) == list(range(EPOCHS * 4))
        assert got == pytest.approx(want, rel=1e-6)
        # Validation: at the last batch's step (steps_from), and at the epoch without it.
        val = {3 + 4 * e: dict(nv)[name] for e, nv in rec.evals.items()}
        assert scalars(mux, f"val/{name}") == pytest.approx(val, rel=1e-6)
        assert sorted(scalars(mux, f"val_by_epoch/{name}")) == [0, 1]
    # Epoch end: every argument and aux parameter, and the gradients.
    h = histos(logdir)
    params = ["fc1_weight", "fc1_bias", "bn1_gamma", "bn1_beta", "fc2_weight", "fc2_bias"]
    expected = {*params, *(p + "/grad" for p in params), "bn1_moving_mean", "bn1_moving_var"}
    assert expected <= tags(mux, "histograms")
    for epoch, values in rec.epochs.items():
        for tag, ref in values.items():
            assert_histo(h[(tag, 3 + 4 * epoch)], ref)
            assert steps(mux, tag) == [3, 7]
    # The monitor: outputs, a weight and its gradient every 2nd batch, as histograms.
    monitored = {"monitor/fc1_output", "monitor/relu1_output", "monitor/fc2_weight", "monitor/fc2_weight_grad"}
    assert {t for t in tags(mux, "histograms") if t.startswith("monitor/")} == monitored
    for tag in monitored:
        assert steps(mux, tag) == [0, 2, 4, 6]
    assert h[("monitor/fc1_output", 0)].num == BATCH * 8
    # stat='norm' (driven by hand): the L2 norm of fc1_weight after each update, batches 0 and 3.
    assert steps(mux, "norm/fc1_weight/norm") == [0, 3]
    assert scalars(mux, "norm/fc1_weight/norm")[3] == pytest.approx(np.linalg.norm(final["fc1_weight"]), rel=1e-5)


def test_monitor_copies_each_output_before_later_ops_reuse_its_memory(tmp_path) -> None:
    """Outputs are handed over from the executor's callback, so each histogram is of
    that op's output even if a later op (the in-place relu) writes over its memory."""
    logdir = str(tmp_path)
    it = data_iter()
    mod = mx.mod.Module(mlp_symbol(), context=mx.cpu())
    mod.bind(data_shapes=it.provide_data, label_shapes=it.provide_label)
    mod.init_params(mx.init.Uniform(0.5))
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.5})
    exe = mod._exec_group.execs[0]
    want: dict[tuple[str, int], np.ndarray] = {}
    with SidecarWriter(logdir) as sw:
        mon = monitor_to_writer(sw, pattern=r"fc1_output|relu1_output|fc1_weight(_grad)?$|softmax_output")
        mod.install_monitor(mon)
        mod.install_monitor(mon)  # again, as fit(monitor=mon) would: still one executor
        assert len(mon.exes) == 1
        for step, batch in enumerate(it):
            w = exe.arg_dict["fc1_weight"].asnumpy()
            b = exe.arg_dict["fc1_bias"].asnumpy()
            mon.tic()
            mod.forward_backward(batch)
            mod.update()
            logged = mon.toc()
            assert {name for _, name, _ in logged} == {
                "fc1_output",
                "relu1_output",
                "softmax_output",
                "fc1_weight",
                "fc1_weight_grad",
            }
            assert {s for s, _, _ in logged} == {step}
            fc1 = batch.data[0].asnumpy() @ w.T + b
            want[("monitor/fc1_output", step)] = fc1
            want[("monitor/relu1_output", step)] = np.maximum(fc1, 0)
            want[("monitor/softmax_output", step)] = mod.get_outputs()[0].asnumpy()
            want[("monitor/fc1_weight", step)] = exe.arg_dict["fc1_weight"].asnumpy()  # after the update
            want[("monitor/fc1_weight_grad", step)] = exe.grad_dict["fc1_weight"].asnumpy()
    h = histos(logdir)
    assert set(want) <= set(h)
    for key, ref in want.items():
        assert_histo(h[key], ref)


def test_monitor_with_two_devices_and_a_stat_function(tmp_path) -> None:
    logdir = str(tmp_path)
    mod = mx.mod.Module(mlp_symbol(), context=[mx.cpu(0), mx.cpu(1)])  # one executor per device
    with SidecarWriter(logdir) as sw:
        mean_abs = monitor_to_writer(sw, pattern="fc1_output|fc1_weight_grad", stat=lambda a: mx.nd.abs(a).mean())
        mod.fit(data_iter(), num_epoch=1, monitor=mean_abs, epoch_end_callback=epoch_end_callback(sw, mod, grads=True))
    mux = load_multiplexer(logdir)
    monitored = {f"monitor/{n}/exe{i}/stat" for n in ("fc1_output", "fc1_weight_grad") for i in (0, 1)}
    assert {t for t in tags(mux, "scalars") if t.startswith("monitor/")} == monitored
    assert steps(mux, "monitor/fc1_output/exe1/stat") == [0, 1, 2, 3]
    h = histos(logdir)
    assert h[("fc1_weight/grad", 0)].num == 8 * 5  # the first device's gradient


def test_writer_errors_in_the_executor_callback_surface_at_toc(tmp_path) -> None:
    class Failing(ListWriter):
        def add_histogram(self, tag: str, values: Any, step: int | None = None) -> None:
            raise RuntimeError(f"disk full at {tag}")

    mod = mx.mod.Module(mlp_symbol(), context=mx.cpu())
    with pytest.raises(RuntimeError, match="disk full at monitor/fc1_output"):
        mod.fit(data_iter(), num_epoch=1, monitor=monitor_to_writer(Failing(), pattern="fc1_output"))


def test_module_fit_integrations_never_sync(tmp_path, no_sync) -> None:
    logdir = str(tmp_path)
    mod = mx.mod.Module(mlp_symbol(), context=mx.cpu())
    with SidecarWriter(logdir) as sw, no_sync() as allowed:
        batches = batch_end_callback(sw, every=1)
        mod.fit(
            data_iter(),
            eval_data=data_iter(seed=1),
            num_epoch=EPOCHS,
            monitor=monitor_to_writer(sw, pattern=".*"),
            batch_end_callback=batches,
            epoch_end_callback=epoch_end_callback(sw, mod, grads=True, steps_from=batches),
            eval_end_callback=eval_end_callback(sw, steps_from=batches),
        )
        norms = monitor_to_writer(sw, pattern=".*weight", stat="norm", prefix="norm/")
        mod.install_monitor(norms)
        for batch in data_iter():
            norms.tic()
            mod.forward_backward(batch)
            norms.toc_print()
    # Every sync on the training thread was MXNet's metric update (accuracy: asnumpy of
    # predictions and labels, 4 train + 4 validation batches per epoch).
    assert set(allowed) == {"asnumpy in update"}, allowed
    mux = load_multiplexer(logdir)
    assert steps(mux, "train/accuracy") == list(range(8))
    assert steps(mux, "monitor/fc1_output") == list(range(8))
    assert steps(mux, "norm/fc1_weight/norm") == [0, 1, 2, 3]


# -- the Gluon Estimator ------------------------------------------------------------------------


def gluon_data(batch: int) -> Any:
    x, y = synthetic()
    return mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(x, y), batch_size=batch)


def gluon_net() -> Any:
    net = mx.gluon.nn.HybridSequential(prefix="net_")  # parameter names independent of other tests
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(8, activation="relu"), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Dense(2))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


class EstimatorRecorder(TrainBegin, BatchEnd, EpochEnd):
    """Runs after SidecarHandler (priority 1): what the Estimator's metrics said."""

    priority = 1

    def __init__(self) -> None:
        self.train: dict[int, list[tuple[str, float]]] = {}
        self.val: dict[int, list[tuple[str, float]]] = {}
        self.loss: dict[int, float] = {}
        self.lr: dict[int, float] = {}
        self.step = 0

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        self.train[self.step] = [nv for m in estimator.train_metrics for nv in m.get_name_value()]
        self.loss[self.step] = float(np.mean(np.concatenate([x.asnumpy().ravel() for x in kwargs["loss"]])))
        self.lr[self.step] = estimator.trainer.learning_rate
        self.step += 1
        return False

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        self.val[self.step - 1] = [nv for m in estimator.val_metrics for nv in m.get_name_value()]
        return False


def test_estimator_handler(tmp_path) -> None:
    logdir = str(tmp_path)
    net = gluon_net()
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.2})
    est = Estimator(net, mx.gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer)  # default metrics
    rec = EstimatorRecorder()
    with SidecarWriter(logdir) as sw:
        handler = SidecarHandler(sw, log_every=2, histograms_every=2, param_prefix="params/")
        est.fit(gluon_data(BATCH), val_data=gluon_data(32), epochs=3, event_handlers=[handler, rec])
        final = {
            name: (p.data().asnumpy(), p.grad().asnumpy() if p.grad_req != "null" else None)
            for name, p in net.collect_params().items()
        }
    mux = load_multiplexer(logdir)
    scalar_tags = {"train/accuracy", "train/softmaxcrossentropyloss", "train/learning_rate", "train/loss"}
    scalar_tags |= {"val/accuracy", "val/softmaxcrossentropyloss"}
    assert tags(mux, "scalars") == scalar_tags
    # Every 2nd batch (12 batches in all): the metrics as MXNet had them, lr, mean loss.
    for name in ("accuracy", "softmaxcrossentropyloss"):
        got = scalars(mux, f"train/{name}")
        assert sorted(got) == list(range(0, 12, 2))
        assert got == pytest.approx({s: dict(rec.train[s])[f"training {name}"] for s in got}, rel=1e-6)
        val = scalars(mux, f"val/{name}")
        assert val == pytest.approx({s: dict(nv)[f"validation {name}"] for s, nv in rec.val.items()}, rel=1e-6)
        assert sorted(val) == [3, 7, 11]
    assert scalars(mux, "train/loss") == pytest.approx({s: rec.loss[s] for s in range(0, 12, 2)}, rel=1e-5)
    assert scalars(mux, "train/learning_rate") == pytest.approx({s: 0.2 for s in range(0, 12, 2)})
    # Histograms at epoch 2 (step 7) and, the last epoch not being a multiple, at train end (11).
    h = histos(logdir)
    for name, (data, grad) in final.items():
        assert steps(mux, f"params/{name}") == [7, 11]
        assert_histo(h[(f"params/{name}", 11)], data)
        if grad is not None:
            assert_histo(h[(f"params/{name}/grad", 11)], grad)
        else:
            assert f"params/{name}/grad" not in tags(mux, "histograms")  # BatchNorm's running stats
    assert "params/net_batchnorm0_running_mean" in tags(mux, "histograms")
    # A second fit goes on from step 12, and logs at its own epoch ends.
    with SidecarWriter(logdir) as sw:
        handler.writer = sw
        est.fit(gluon_data(BATCH), epochs=1, event_handlers=[handler])
    mux = load_multiplexer(logdir)
    assert steps(mux, "train/accuracy")[-2:] == [12, 14]
    assert steps(mux, "params/net_dense0_weight") == [7, 11, 15]


def test_estimator_handler_never_syncs(tmp_path, no_sync) -> None:
    logdir = str(tmp_path)
    net = gluon_net()
    trainer = mx.gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    est = Estimator(net, mx.gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer)
    with SidecarWriter(logdir) as sw:
        # Loaders are made first: DataLoader.__init__ calls nd.waitall() (not a training step).
        train, val = gluon_data(BATCH), gluon_data(32)
        with no_sync() as allowed:
            est.fit(train, val_data=val, epochs=2, event_handlers=[SidecarHandler(sw, log_every=1)])
            log_params(sw, net, 100)
    # The Estimator's MetricHandler: Accuracy.update (asnumpy) and Loss.update (asscalar).
    assert set(allowed) == {"asnumpy in update", "asscalar in update"}, allowed
    mux = load_multiplexer(logdir)
    assert steps(mux, "train/loss") == list(range(8))
    assert steps(mux, "net_dense0_weight/grad") == [3, 7, 100]


# -- log_params ----------------------------------------------------------------------------------


def test_log_params(tmp_path) -> None:
    logdir = str(tmp_path)
    net = mx.gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(6, in_units=4), mx.gluon.nn.BatchNorm(in_channels=6), mx.gluon.nn.Dense(3))
    net.initialize()
    net[0].bias.grad_req = "null"
    x = mx.nd.random.uniform(shape=(5, 4))
    with SidecarWriter(logdir) as sw:
        before = log_params(sw, net, 0)  # dense1 is deferred (no in_units): skipped
        with mx.autograd.record():
            y = net(x).sum()
        y.backward()
        after = log_params(sw, net, 1, prefix="p/")
        no_grads = log_params(sw, net.collect_params(), 2, grads=False, prefix="q/")
    params = net.collect_params()
    assert "net_dense1_weight" not in before and "net_dense0_weight/grad" in before
    assert set(after) == {
        *(f"p/{n}" for n in params),
        *(f"p/{n}/grad" for n, p in params.items() if p.grad_req != "null"),
    }
    assert "p/net_dense0_bias/grad" not in after and "p/net_batchnorm0_running_mean/grad" not in after
    assert no_grads == [f"q/{n}" for n in params]
    mux = load_multiplexer(logdir)
    assert tags(mux, "histograms") == {*before, *after, *no_grads}
    h = histos(logdir)
    for name, p in params.items():
        assert sum(c for _, _, c in tensor_values(mux, ".", f"p/{name}")[0][1]) == p.data().size
        assert_histo(h[(f"p/{name}", 1)], p.data().asnumpy())
        if p.grad_req != "null":
            assert_histo(h[(f"p/{name}/grad", 1)], p.grad().asnumpy())


# -- the examples ------------------------------------------------------------------------------


def run_example(name: str, logdir: str) -> str:
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", name), "--quick", "--logdir", logdir],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tensorboard --logdir" in out.stdout
    (run,) = glob.glob(os.path.join(logdir, "*-*"))
    return run


@pytest.mark.timeout(300)
def test_example_train_module_fit(tmp_path) -> None:
    mux = load_multiplexer(run_example("train_module_fit.py", str(tmp_path)))
    assert steps(mux, "train/accuracy") == list(range(0, 16, 2))  # 8 batches x 2 epochs, every 2
    assert steps(mux, "val/cross-entropy") == [7, 15]
    hist = tags(mux, "histograms")
    assert {"params/fc1_weight", "params/fc1_weight/grad", "params/bn1_moving_mean", "monitor/relu1_output"} <= hist
    assert steps(mux, "monitor/fc2_weight_grad") == [0, 4, 8, 12]
    assert mux.Graph(".") is not None


@pytest.mark.timeout(300)
def test_example_estimator_handler(tmp_path) -> None:
    mux = load_multiplexer(run_example("estimator_handler.py", str(tmp_path)))
    assert steps(mux, "train/loss") == [0, 2, 4, 6]  # 4 batches x 2 epochs, every 2
    assert steps(mux, "val/accuracy") == [3, 7]
    assert {"train/softmaxcrossentropyloss", "train/learning_rate"} <= tags(mux, "scalars")
    assert steps(mux, "params/conv0_weight/grad") == [3, 7]
