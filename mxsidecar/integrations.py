"""Logging from MXNet's training loops: ``Module.fit`` callbacks, a Gluon Estimator
event handler, a ``mx.mon.Monitor`` that writes instead of printing, and parameter
histograms of a Gluon Block.

Everything here hands NDArrays to the writer as they are (the writer's engine copy
runs after whatever computes them), so none of it waits on MXNet's engine in the
training thread.  What MXNet's own loops do is another matter: ``Module.fit`` and the
Estimator update their metrics with ``asnumpy()`` every batch (``mx.metric``), so the
metric values these callbacks log are Python floats that MXNet already computed.

``import mxsidecar.integrations`` does not import mxnet: the classes that must derive
from MXNet's (:class:`WriterMonitor` from ``mx.mon.Monitor``, :class:`SidecarHandler`
from the Estimator's handler mixins) get those bases when they are first
instantiated, and the rest is plain Python.

``writer`` below is a :class:`~mxsidecar.SidecarWriter`, or anything with
``add_scalar(tag, value, step)`` and ``add_histogram(tag, values, step)``.
"""

from __future__ import annotations

import ctypes
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import numpy as np

__all__ = [
    "BatchEndCallback",
    "EpochEndCallback",
    "EvalEndCallback",
    "SidecarHandler",
    "WriterLike",
    "WriterMonitor",
    "batch_end_callback",
    "epoch_end_callback",
    "eval_end_callback",
    "log_params",
    "monitor_to_writer",
]


class WriterLike(Protocol):
    """What the integrations need of a writer (positional arguments only)."""

    def add_scalar(self, tag: str, value: Any, global_step: int | None = None, /) -> None: ...

    def add_histogram(self, tag: str, values: Any, global_step: int | None = None, /) -> None: ...


def _check_every(value: Any, name: str, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def _check_prefix(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def _join(prefix: str, name: str) -> str:
    """``'train'`` + ``'accuracy'`` -> ``'train/accuracy'``; an empty prefix adds nothing."""
    return f"{prefix.rstrip('/')}/{name}" if prefix else name


def _log_name_values(writer: WriterLike, prefix: str, pairs: Iterable[tuple[str, Any]], step: int) -> None:
    for name, value in pairs:
        writer.add_scalar(_join(prefix, str(name)), value, step)


# -- parameters of a Gluon Block ---------------------------------------------------------


def log_params(writer: WriterLike, net: Any, step: int, grads: bool = True, prefix: str = "") -> list[str]:
    """Log a histogram of every parameter of a Gluon Block, and of its gradient.

    Parameters
    ----------
    writer : SidecarWriter or a writer with ``add_histogram(tag, values, step)``
        Where the histograms go.  The NDArrays are handed over as they are: no
        ``asnumpy()``, no wait.
    net : gluon.Block, or a mapping of name to gluon.Parameter
        A Block's ``collect_params()`` is used; a ``ParameterDict`` or dict is taken as is.
    step : int >= 0
        The global step of every histogram.
    grads : bool, default True
        Also log each gradient, as ``<tag>/grad``, for parameters whose ``grad_req`` is
        not ``'null'``.
    prefix : str, default ''
        Prepended as is to each parameter name: the tags are ``<prefix><param name>``
        and ``<prefix><param name>/grad`` (``prefix='params/'`` groups them).

    Returns
    -------
    list of str
        The tags logged.  A parameter on several devices is logged from its first
        device.  Parameters that cannot be read without a sync or a guess are skipped:
        deferred-initialized ones before the first forward pass (no shape yet), and
        ``row_sparse`` ones (MXNet reads them only by row ids).

    A parameter that was never initialized raises MXNet's own error.
    """
    from mxnet.gluon.parameter import DeferredInitializationError

    _check_prefix(prefix, "prefix")
    params: Mapping[str, Any] = net.collect_params() if hasattr(net, "collect_params") else net
    if not hasattr(params, "items"):
        raise TypeError(f"net must be a gluon.Block or a mapping of name to Parameter, got {type(net).__name__}")
    tags: list[str] = []
    for name, param in params.items():
        if getattr(param, "_stype", "default") != "default":
            continue
        try:
            data = param.list_data()[0]
        except DeferredInitializationError:
            continue
        tag = prefix + name
        writer.add_histogram(tag, data, step)
        tags.append(tag)
        if grads and param.grad_req != "null":
            writer.add_histogram(tag + "/grad", param.list_grad()[0], step)
            tags.append(tag + "/grad")
    return tags


# -- Module.fit callbacks --------------------------------------------------------------------


class BatchEndCallback:
    """``batch_end_callback`` for ``Module.fit``: see :func:`batch_end_callback`.

    ``last_step`` is the global step of the last batch it saw (None before the first),
    which :func:`epoch_end_callback` and :func:`eval_end_callback` can align to.
    """

    def __init__(
        self, writer: WriterLike, every: int = 50, prefix: str = "train", batches_per_epoch: int | None = None
    ) -> None:
        self.writer = writer
        self.every = _check_every(every, "every")
        self.prefix = _check_prefix(prefix, "prefix")
        self.batches_per_epoch = (
            None if batches_per_epoch is None else _check_every(batches_per_epoch, "batches_per_epoch")
        )
        self.last_step: int | None = None
        self._epoch: int | None = None
        self._last_nbatch = -1
        self._warned = False

    def _step(self, epoch: int, nbatch: int) -> int:
        if self._epoch is None and epoch != 0 and self.batches_per_epoch is None:
            raise ValueError(
                f"batch_end_callback: the first batch seen is of epoch {epoch} (a fit resumed with begin_epoch > 0), "
                "so the number of batches per epoch cannot be learned from epoch 0; pass batches_per_epoch="
            )
        if self._epoch is not None and epoch != self._epoch:
            if self.batches_per_epoch is None:
                self.batches_per_epoch = self._last_nbatch + 1  # learned from the first epoch
            self._last_nbatch = -1
        self._epoch = epoch
        self._last_nbatch = max(self._last_nbatch, nbatch)
        if self.batches_per_epoch is None:
            return nbatch  # epoch 0, still counting
        if nbatch >= self.batches_per_epoch and not self._warned:
            self._warned = True
            warnings.warn(
                f"batch_end_callback: epoch {epoch} has more than batches_per_epoch={self.batches_per_epoch} "
                "batches; its last steps overlap the next epoch's (pass batches_per_epoch= to fix)",
                RuntimeWarning,
                stacklevel=3,
            )
        return epoch * self.batches_per_epoch + nbatch

    def __call__(self, param: Any) -> None:
        """Called by ``Module.fit`` with a ``BatchEndParam(epoch, nbatch, eval_metric, locals)``."""
        step = self._step(int(param.epoch), int(param.nbatch))
        self.last_step = step
        if step % self.every == 0 and param.eval_metric is not None:
            _log_name_values(self.writer, self.prefix, param.eval_metric.get_name_value(), step)


def batch_end_callback(
    writer: WriterLike, every: int = 50, prefix: str = "train", batches_per_epoch: int | None = None
) -> BatchEndCallback:
    """A ``batch_end_callback`` for ``Module.fit`` that logs the training metrics as scalars.

    Parameters
    ----------
    writer : SidecarWriter or a writer with ``add_scalar(tag, value, step)``
        Where the scalars go.
    every : int >= 1, default 50
        Log when the global step is a multiple of ``every``.
    prefix : str, default 'train'
        Tags are ``<prefix>/<metric name>`` (``'train/accuracy'``); '' logs the bare names.
    batches_per_epoch : int or None
        The global step is ``epoch * batches_per_epoch + nbatch``.  None learns it from
        the first epoch (where the step is ``nbatch``); pass it when resuming a fit
        with ``begin_epoch > 0``.

    Each value is one of ``param.eval_metric.get_name_value()``: Python floats that
    MXNet's metric has already computed on the host (its ``update`` calls
    ``asnumpy()`` every batch, in ``fit`` itself); this callback adds no sync.
    ``fit`` resets the metric each epoch, so a value is the running mean of the epoch
    so far (or since the last ``reset_local``, if ``mx.callback.Speedometer`` with
    ``auto_reset`` runs before it).
    """
    return BatchEndCallback(writer, every, prefix, batches_per_epoch)


def _epoch_step(epoch: int, steps_from: BatchEndCallback | None) -> int:
    if steps_from is not None and steps_from.last_step is not None:
        return steps_from.last_step
    return epoch


class EpochEndCallback:
    """``epoch_end_callback`` for ``Module.fit``: see :func:`epoch_end_callback`."""

    def __init__(
        self,
        writer: WriterLike,
        module: Any = None,
        grads: bool = False,
        prefix: str = "",
        steps_from: BatchEndCallback | None = None,
    ) -> None:
        if grads and module is None:
            raise ValueError("epoch_end_callback: grads=True needs the module (its executors hold the gradients)")
        self.writer = writer
        self.module = module
        self.grads = bool(grads)
        self.prefix = _check_prefix(prefix, "prefix")
        self.steps_from = steps_from

    def __call__(
        self, epoch: int, symbol: Any = None, arg_params: Mapping[str, Any] | None = None, aux_params: Any = None
    ) -> None:
        """Called by ``Module.fit`` as ``(epoch, symbol, arg_params, aux_params)``."""
        step = _epoch_step(int(epoch), self.steps_from)
        for params in (arg_params, aux_params):
            for name, array in (params or {}).items():
                self.writer.add_histogram(self.prefix + name, array, step)
        if self.grads:
            for name, grad in _module_grads(self.module):
                self.writer.add_histogram(f"{self.prefix}{name}/grad", grad, step)


def _module_grads(module: Any) -> list[tuple[str, Any]]:
    """(parameter name, gradient on the first device) of a bound Module (or BucketingModule)."""
    module = getattr(module, "_curr_module", None) or module
    group = getattr(module, "_exec_group", None)
    if group is None:
        raise ValueError("epoch_end_callback: grads=True needs a bound mx.mod.Module (bind or fit first)")
    grads = group.grad_arrays or []  # None unless bound for_training
    return [(name, per_device[0]) for name, per_device in zip(group.param_names, grads) if per_device]


def epoch_end_callback(
    writer: WriterLike,
    module: Any = None,
    grads: bool = False,
    prefix: str = "",
    steps_from: BatchEndCallback | None = None,
) -> EpochEndCallback:
    """An ``epoch_end_callback`` for ``Module.fit``: histograms of every parameter.

    Parameters
    ----------
    writer : SidecarWriter or a writer with ``add_histogram(tag, values, step)``
        Where the histograms go.
    module : mx.mod.Module or None
        Needed only for ``grads=True``.
    grads : bool, default False
        Also log the gradients of the epoch's last batch (first device), read from
        the module's executors (``module._exec_group``: MXNet has no public accessor),
        as ``<prefix><name>/grad``.
    prefix : str, default ''
        Prepended as is: tags are ``<prefix><param name>`` for every argument and
        auxiliary parameter (``arg_params``, ``aux_params``: the NDArrays ``fit`` just
        synced from the devices, by engine copies, handed over as they are).
    steps_from : BatchEndCallback or None
        Log at that callback's last global step (the epoch's last batch), so
        histograms and scalars share one x axis.  None logs at step ``epoch``.
    """
    return EpochEndCallback(writer, module, grads, prefix, steps_from)


class EvalEndCallback:
    """``eval_end_callback`` for ``Module.fit``: see :func:`eval_end_callback`."""

    def __init__(self, writer: WriterLike, prefix: str = "val", steps_from: BatchEndCallback | None = None) -> None:
        self.writer = writer
        self.prefix = _check_prefix(prefix, "prefix")
        self.steps_from = steps_from

    def __call__(self, param: Any) -> None:
        """Called by ``Module.score`` (from ``fit``) with a ``BatchEndParam``."""
        if param.eval_metric is not None:
            step = _epoch_step(int(param.epoch), self.steps_from)
            _log_name_values(self.writer, self.prefix, param.eval_metric.get_name_value(), step)


def eval_end_callback(
    writer: WriterLike, prefix: str = "val", steps_from: BatchEndCallback | None = None
) -> EvalEndCallback:
    """An ``eval_end_callback`` for ``Module.fit`` (``score_end_callback`` of ``Module.score``):
    the validation metrics as scalars, once per evaluation.

    Parameters
    ----------
    writer : SidecarWriter or a writer with ``add_scalar(tag, value, step)``
        Where the scalars go.
    prefix : str, default 'val'
        Tags are ``<prefix>/<metric name>`` (``'val/accuracy'``).
    steps_from : BatchEndCallback or None
        Log at that callback's last global step (the epoch's last training batch), so
        training and validation curves share one x axis.  None logs at step ``epoch``.
    """
    return EvalEndCallback(writer, prefix, steps_from)


# -- classes that derive from MXNet's, given their bases on first use --------------------


_DERIVED: dict[type, type] = {}


def _with_base(cls: type, base_path: tuple[str, ...]) -> type:
    """``cls`` combined with MXNet classes (``base_path``: dotted names of classes under
    ``mxnet``), created once per class; ``cls`` itself if it already derives from them."""
    derived = _DERIVED.get(cls)
    if derived is None:
        import importlib

        bases = []
        for dotted in base_path:
            module, _, name = dotted.rpartition(".")
            bases.append(getattr(importlib.import_module(module), name))
        if all(issubclass(cls, b) for b in bases):
            derived = cls
        else:
            derived = type(cls.__name__, (cls, *bases), {"__module__": cls.__module__, "__doc__": cls.__doc__})
        _DERIVED[cls] = derived
    return derived


_D = TypeVar("_D", bound="_DerivesFromMXNet")


class _DerivesFromMXNet:
    """Instances are of ``cls`` combined with ``_MXNET_BASES``, made on first use."""

    _MXNET_BASES: tuple[str, ...] = ()

    def __new__(cls: type[_D], *args: Any, **kwargs: Any) -> _D:
        obj: _D = object.__new__(_with_base(cls, cls._MXNET_BASES))
        return obj


# -- the Monitor bridge ------------------------------------------------------------------------

_STATS = ("histogram", "norm")


class WriterMonitor(_DerivesFromMXNet):
    """An ``mx.mon.Monitor`` (a subclass of it, once instantiated) that logs what it
    collects instead of printing it: see :func:`monitor_to_writer`.
    """

    _MXNET_BASES = ("mxnet.monitor.Monitor",)

    def __init__(
        self,
        writer: WriterLike,
        interval: int = 1,
        pattern: str = ".*",
        stat: str | Callable[[Any], Any] = "histogram",
        prefix: str = "monitor/",
        monitor_all: bool = False,
        sort: bool = False,
    ) -> None:
        # Monitor.__init__ is not called: every attribute it sets is set here, and
        # every method that uses them is overridden.
        if not (callable(stat) or stat in _STATS):
            raise ValueError(f"stat must be one of {_STATS} or a callable NDArray -> NDArray, got {stat!r}")
        self.writer = writer
        self.interval = _check_every(interval, "interval")
        self.stat = stat
        self.prefix = _check_prefix(prefix, "prefix")
        self.re_prog = re.compile(pattern)
        self.monitor_all = bool(monitor_all)
        self.sort = bool(sort)
        self.activated = False
        self.step = 0
        self.exes: list[Any] = []
        self.queue: list[tuple[int, str, str]] = []
        self.stat_func: Callable[[Any], Any] = stat if callable(stat) else _STAT_FUNCS[stat]
        self.stat_helper = self._callback(0)
        self._errors: list[BaseException] = []

    # Monitor's API ------------------------------------------------------------------
    def install(self, exe: Any) -> None:
        """Install the callback on an executor (``mod.install_monitor(mon)`` calls this
        for each of the module's executors; ``mod.fit(monitor=mon)`` too)."""
        index = next((i for i, e in enumerate(self.exes) if e is exe), None)
        if index is None:  # installed again (fit installs the monitor it is given): same index
            index = len(self.exes)
            self.exes.append(exe)
        exe.set_monitor_callback(self._callback(index), self.monitor_all)

    def tic(self) -> None:
        """Start collecting for this batch (call before forward).  Unlike
        ``Monitor.tic`` it does not wait for the executors' arrays: the engine orders
        every copy after the op that writes its array."""
        if self.step % self.interval == 0:
            self.queue = []
            self.activated = True
        self.step += 1

    def toc(self) -> list[tuple[int, str, str]]:
        """End collecting for this batch: log the arguments (weights, data, labels),
        their gradients (``<name>_grad``) and the auxiliary states that match the
        pattern, and return ``(step, name, tag)`` for everything logged this batch
        (op outputs were logged as the executor produced them).  Nothing waits,
        nothing is converted to text.  Raises the first error the writer raised
        inside the executor's callback (where MXNet would only print it)."""
        if not self.activated:
            return []
        for index, exe in enumerate(self.exes):
            for name, array in exe.arg_dict.items():
                self._collect(name, array, index)
            for name, array in exe.grad_dict.items():
                if array is not None:
                    self._collect(name + "_grad", array, index)
            for name, array in exe.aux_dict.items():
                self._collect(name, array, index)
        self.activated = False
        res, self.queue = self.queue, []
        if self.sort:
            res.sort(key=lambda item: item[1])
        if self._errors:
            error = self._errors[0]
            self._errors.clear()
            raise error
        return res

    def toc_print(self) -> None:
        """What ``Module.fit`` calls after each batch: :meth:`toc`, printing nothing."""
        self.toc()

    # internals ------------------------------------------------------------------------
    def _callback(self, index: int) -> Callable[[Any, Any], None]:
        from mxnet.base import NDArrayHandle, py_str
        from mxnet.ndarray import NDArray

        def on_array(name: Any, handle: Any) -> None:
            """The executor's monitor callback: runs in the thread that called forward or
            backward, right after the op producing ``handle`` was pushed."""
            # Own the handle first: MXNet allocated it for us, and frees it with this object.
            array = NDArray(ctypes.cast(handle, NDArrayHandle), writable=False)
            if not self.activated:
                return
            try:
                self._collect(py_str(name), array, index)
            except BaseException as exc:  # an exception would die in ctypes, printed only
                self._errors.append(exc)

        return on_array

    def _collect(self, name: str, array: Any, index: int) -> None:
        if not self.re_prog.match(name) or array.size == 0:
            return
        tag = self.prefix + name + (f"/exe{index}" if len(self.exes) > 1 else "")
        step = self.step - 1  # the batch index: tic counted this batch already
        if self.stat == "histogram":
            self.writer.add_histogram(tag, array, step)
        else:
            tag += "/norm" if self.stat == "norm" else "/stat"
            self.writer.add_scalar(tag, self.stat_func(array), step)
        self.queue.append((step, name, tag))


def _identity(x: Any) -> Any:
    return x


def _l2_norm(array: Any) -> Any:
    """The L2 norm as a one-element NDArray, computed on the engine (no sync)."""
    import mxnet as mx

    if np.dtype(array.dtype).kind != "f":
        array = array.astype("float32")  # an engine op too
    return mx.nd.norm(array).reshape((1,))


_STAT_FUNCS: dict[str, Callable[[Any], Any]] = {"histogram": _identity, "norm": _l2_norm}


def monitor_to_writer(
    writer: WriterLike,
    interval: int = 1,
    pattern: str = ".*",
    stat: str | Callable[[Any], Any] = "histogram",
    prefix: str = "monitor/",
    monitor_all: bool = False,
) -> WriterMonitor:
    """An ``mx.mon.Monitor`` whose arrays go to the writer instead of the log.

    Use it as MXNet's: ``mod.fit(..., monitor=mon)``, or ``mod.install_monitor(mon)``
    and ``mon.tic()`` / forward-backward / ``mon.toc_print()``.  ``mx.mon.Monitor``
    waits for every argument array in ``tic`` and ``toc`` and turns each statistic into
    text with ``asscalar()``/``asnumpy()``: one sync per array per batch.  This one waits
    for nothing: each array is handed to the writer as an NDArray when the executor
    produces it (outputs, in the executor's callback, so later ops that reuse its
    memory cannot overwrite it first) or in ``toc`` (weights, gradients, aux states).

    Parameters
    ----------
    writer : SidecarWriter or a writer with ``add_histogram`` and ``add_scalar``
        Where the arrays go.
    interval : int >= 1, default 1
        Collect every ``interval`` batches (counted by ``tic``).
    pattern : str, default '.*'
        Regular expression matched (``re.match``) against the names: op outputs
        (``fc1_output``, ``fc1_backward_output0``...), arguments (``fc1_weight``,
        ``data``), argument gradients (``fc1_weight_grad``, an addition to
        ``mx.mon.Monitor``) and auxiliary states (``bn1_moving_mean``).
    stat : 'histogram', 'norm', or callable, default 'histogram'
        ``'histogram'``: ``add_histogram(<prefix><name>, array)``.  ``'norm'``: the L2
        norm, computed by an NDArray op, as the scalar ``<prefix><name>/norm``.  A
        callable ``NDArray -> one-element NDArray`` (MXNet's ``stat_func``) logs the
        scalar ``<prefix><name>/stat``.
    prefix : str, default 'monitor/'
        Prepended as is to every name.
    monitor_all : bool, default False
        Also collect each op's inputs (``mx.mon.Monitor``'s ``monitor_all``).

    The step of everything logged for a batch is its index as counted by ``tic``
    (from 0), which is ``fit``'s global batch index.  With several executors (one per
    device) ``/exe<i>`` follows the name in each tag.  An executor has one monitor
    callback: installing another monitor on it replaces this one's.  An error the
    writer raises inside the executor's callback (where ctypes would only print it) is
    raised by the next ``toc()``.
    """
    return WriterMonitor(writer, interval, pattern, stat, prefix, monitor_all)


# -- the Gluon Estimator event handler -----------------------------------------------------

_ESTIMATOR_NAME = re.compile(r"^(training|validation) ")


def _strip_estimator_prefix(name: str) -> str:
    """The Estimator renames metrics 'training accuracy' / 'validation accuracy'."""
    return _ESTIMATOR_NAME.sub("", str(name), count=1)


class SidecarHandler(_DerivesFromMXNet):
    """A Gluon Estimator event handler that logs training to a writer.

    An instance is also the Estimator's ``TrainBegin``, ``BatchEnd``, ``EpochEnd`` and
    ``TrainEnd`` handler (those bases are added on first instantiation, so importing
    this module does not import mxnet).  ``est.fit(train, val, epochs=3,
    event_handlers=[SidecarHandler(sw)])``.

    Parameters
    ----------
    writer : SidecarWriter or a writer with ``add_scalar`` and ``add_histogram``
        Where everything goes.
    log_every : int >= 1, default 10
        Every ``log_every`` batches (global step a multiple of it): each training
        metric as ``<train_prefix>/<name>`` (the Estimator's 'training ' dropped from
        the name), the learning rate as ``<train_prefix>/learning_rate``, and the
        batch's mean loss as ``<train_prefix>/loss``, computed from the loss NDArrays
        by NDArray ops (no sync).
    histograms_every : int >= 0, default 1
        Every ``histograms_every`` epochs, histograms of the parameters (and, with
        ``grads``, of the last batch's gradients): see :func:`log_params`.  0: none.
        The last epoch is always logged at train end.
    grads : bool, default True
        Include gradients in the histograms.
    train_prefix, val_prefix : str, default 'train', 'val'
        Tag directories of training and validation scalars.
    param_prefix : str, default ''
        Prepended as is to parameter names.
    val_every : int >= 1, default 1
        Log the validation metrics every ``val_every`` epochs: set it to the
        ``ValidationHandler``'s ``epoch_period`` when that is not 1 (the metrics keep
        their last values between validations).
    priority : float, default 0
        The Estimator calls handlers by ascending priority; its metric, gradient
        update and validation handlers run at -2000 to -1000, so by default this one
        sees updated metrics and validation results.

    The global step is the number of batches trained before, from 0, and goes on
    across ``fit`` calls with the same handler.  Epoch-level values (validation,
    histograms) are logged at the step of the epoch's last batch.

    The Estimator itself syncs every batch: its ``MetricHandler`` updates the metrics
    with ``asnumpy()``/``asscalar()``.  This handler reads the floats those left.
    """

    _MXNET_BASES = (
        "mxnet.gluon.contrib.estimator.event_handler.TrainBegin",
        "mxnet.gluon.contrib.estimator.event_handler.BatchEnd",
        "mxnet.gluon.contrib.estimator.event_handler.EpochEnd",
        "mxnet.gluon.contrib.estimator.event_handler.TrainEnd",
    )

    # The Estimator rejects handlers with any attribute whose name contains "metric"
    # (utils._check_handler_metric_ref): none here does.

    def __init__(
        self,
        writer: WriterLike,
        log_every: int = 10,
        histograms_every: int = 1,
        grads: bool = True,
        train_prefix: str = "train",
        val_prefix: str = "val",
        param_prefix: str = "",
        val_every: int = 1,
        priority: float = 0,
    ) -> None:
        self.writer = writer
        self.log_every = _check_every(log_every, "log_every")
        self.histograms_every = _check_every(histograms_every, "histograms_every", allow_zero=True)
        self.grads = bool(grads)
        self.train_prefix = _check_prefix(train_prefix, "train_prefix")
        self.val_prefix = _check_prefix(val_prefix, "val_prefix")
        self.param_prefix = _check_prefix(param_prefix, "param_prefix")
        self.val_every = _check_every(val_every, "val_every")
        self.priority = priority
        self.global_step = 0  # batches trained, over every fit
        self.epoch = 0  # epochs done in this fit
        self._histograms_at: int | None = None

    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        self.epoch = 0  # as the Estimator's own handlers: epoch periods count per fit

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        step = self.global_step
        self.global_step += 1
        if step % self.log_every == 0:
            for m in estimator.train_metrics:
                pairs = ((_strip_estimator_prefix(n), v) for n, v in m.get_name_value())
                _log_name_values(self.writer, self.train_prefix, pairs, step)
            self.writer.add_scalar(_join(self.train_prefix, "learning_rate"), estimator.trainer.learning_rate, step)
            loss = _mean_loss(kwargs.get("loss"))
            if loss is not None:
                self.writer.add_scalar(_join(self.train_prefix, "loss"), loss, step)
        return False

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        self.epoch += 1
        step = max(self.global_step - 1, 0)
        if self.epoch % self.val_every == 0:
            for m in estimator.val_metrics:
                if m.num_inst:  # 0: no validation ran (no val_data)
                    pairs = ((_strip_estimator_prefix(n), v) for n, v in m.get_name_value())
                    _log_name_values(self.writer, self.val_prefix, pairs, step)
        if self.histograms_every and self.epoch % self.histograms_every == 0:
            self._histograms(estimator, step)
        return False

    def train_end(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        step = max(self.global_step - 1, 0)
        if self.histograms_every and self._histograms_at != step:
            self._histograms(estimator, step)

    def _histograms(self, estimator: Any, step: int) -> None:
        log_params(self.writer, estimator.net, step, grads=self.grads, prefix=self.param_prefix)
        self._histograms_at = step


def _mean_loss(loss: Any) -> Any:
    """Mean of the per-sample losses of a batch (a list of NDArrays, one per device) as
    a one-element NDArray, by engine ops; None if there is nothing to average."""
    losses = loss if isinstance(loss, (list, tuple)) else [loss]
    if not losses or not all(hasattr(x, "context") and hasattr(x, "sum") for x in losses):
        return None
    count = sum(int(x.size) for x in losses)
    if count == 0:
        return None
    total = losses[0].sum()
    for x in losses[1:]:
        total = total + x.sum().as_in_context(total.context)
    return (total / count).reshape((1,))
