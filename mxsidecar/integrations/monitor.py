"""The bridge from ``mx.mon.Monitor`` (``mod.install_monitor``) to the writer."""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ._base import WriterLike, _check_every, _check_prefix, _DerivesFromMXNet

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
