"""Parameters and gradients of any Gluon Block, as histograms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._base import WriterLike, _check_prefix

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
