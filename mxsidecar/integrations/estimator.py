"""The Gluon Estimator event handler (``est.fit(..., event_handlers=[SidecarHandler(sw)])``)."""

from __future__ import annotations

import re
from typing import Any

from ._base import WriterLike, _check_every, _check_prefix, _DerivesFromMXNet, _join, _log_name_values
from .params import log_params

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
