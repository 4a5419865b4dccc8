"""Callbacks for the Module API's ``mod.fit``: metrics per batch and per evaluation,
parameter histograms per epoch."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ._base import WriterLike, _check_every, _check_prefix, _log_name_values

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
