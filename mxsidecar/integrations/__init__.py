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

The package has one module per MXNet training API: ``params`` (any Gluon Block),
``module_fit`` (``Module.fit`` callbacks), ``monitor`` (``mx.mon.Monitor``) and
``estimator`` (the Gluon Estimator), over ``_base`` (what they share).
"""

from ._base import WriterLike
from .estimator import SidecarHandler
from .module_fit import (
    BatchEndCallback,
    EpochEndCallback,
    EvalEndCallback,
    batch_end_callback,
    epoch_end_callback,
    eval_end_callback,
)
from .monitor import WriterMonitor, monitor_to_writer
from .params import log_params

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
