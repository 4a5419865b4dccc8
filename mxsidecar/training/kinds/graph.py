"""Graphs (``add_graph``): an MXNet Symbol or a hybridized HybridBlock, as JSON.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/graph.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

import sys
from typing import Any

from ...wire.descriptors import Kind
from ._base import KindCalls, _now

__all__ = ["GraphCalls"]


class GraphCalls(KindCalls):
    # -- graph, hparams, layouts -----------------------------------------------
    def add_graph(self, net: Any, input_shapes: dict[str, tuple[int, ...]] | None = None) -> None:
        """Log a network's structure for TensorBoard's Graphs tab.

        Parameters
        ----------
        net : mx.sym.Symbol or hybridized gluon.HybridBlock
            A HybridBlock must have been hybridized and run forward once (mxboard's
            rule), which is when MXNet has its symbol.
        input_shapes : dict of str to tuple, optional
            Shapes of the inputs (e.g. ``{'data': (1, 3, 224, 224)}``): every node's
            output shape is then inferred (symbolically, no computation) and shown.
        """
        sym = _symbol_of(net)
        options: dict[str, Any] = {}
        if input_shapes is not None:
            if not isinstance(input_shapes, dict):
                raise TypeError("input_shapes must be a dict of input name to shape tuple")
            internals = sym.get_internals()
            try:
                _, out_shapes, _ = internals.infer_shape_partial(**{k: tuple(s) for k, s in input_shapes.items()})
            except Exception as exc:
                raise ValueError(f"input_shapes do not fit the network: {exc}") from exc
            options["shapes"] = {
                name: list(shape) for name, shape in zip(internals.list_outputs(), out_shapes) if shape
            }
        self._pipe.submit(Kind.GRAPH, "graph", 0, _now(), text=sym.tojson(), options=options or None)


def _symbol_of(net: Any) -> Any:
    """The MXNet Symbol of ``net`` (a Symbol, or a hybridized HybridBlock after a forward)."""
    mx = sys.modules.get("mxnet")
    if mx is not None and isinstance(net, mx.sym.Symbol):
        return net
    cached = getattr(net, "_cached_graph", None)
    if mx is not None and isinstance(net, mx.gluon.HybridBlock):
        if not cached:
            raise ValueError("add_graph needs a HybridBlock that was hybridized and run forward once "
                             "(net.hybridize(); net(x)), which is when MXNet builds its symbol")  # fmt: skip
        return cached[1]
    raise TypeError(f"net must be an mx.sym.Symbol or a gluon.HybridBlock, got {type(net).__name__}")
