"""Histograms (``add_histogram``): any real array, TensorBoard's buckets or the caller's.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/histogram.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...wire.descriptors import Kind
from ..arguments import INT64_MAX, check_step, check_walltime, short_repr
from ..capture import is_ndarray
from ._base import KindCalls, _now

__all__ = ["HistogramCalls"]

MAX_BINS = 10_000  # tensorboardX#1: bins='auto' once asked numpy for 66 billion

_HISTOGRAM = Kind.HISTOGRAM

BIN_RULES = ("auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt")


def check_bins(bins: Any, name: str = "bins") -> Any:
    """'default', a numpy rule name, an int in [1, MAX_BINS], or increasing finite edges."""
    if isinstance(bins, str):
        if bins == "default" or bins in BIN_RULES:
            return bins
        raise ValueError(f"{name} must be 'default', an int, a sequence of edges or one of {BIN_RULES}, got {bins!r}")
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        if not 1 <= bins <= MAX_BINS:
            raise ValueError(f"{name} must be from 1 to {MAX_BINS}, got {bins}")
        return int(bins)
    if isinstance(bins, (list, tuple, np.ndarray)):
        try:
            edges = np.asarray(bins, dtype=np.float64) if len(bins) else np.zeros(0)
        except OverflowError:
            raise ValueError(f"{name} as edges must be finite numbers, got {short_repr(bins)}") from None
        if edges.ndim != 1 or not 2 <= edges.size <= MAX_BINS + 1:
            raise ValueError(f"{name} as edges must be a flat sequence of 2 to {MAX_BINS + 1} numbers, got {bins!r}")
        if not np.all(np.isfinite(edges)) or not np.all(np.diff(edges) > 0):
            raise ValueError(f"{name} as edges must be finite and strictly increasing, got {bins!r}")
        return [float(e) for e in edges]
    raise TypeError(f"{name} must be 'default', an int, a sequence of edges or a rule name, got {type(bins).__name__}")


def check_histogram_values(arr: np.ndarray[Any, Any], name: str = "values") -> None:
    """At least one finite value in a numpy array: NaN and Inf are left out of the
    buckets, so an array of nothing else leaves nothing to draw (the sidecar refuses it)."""
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).any():
        raise ValueError(f"{name} must hold at least one finite value, got only NaN/Inf (shape {arr.shape})")


class HistogramCalls(KindCalls):
    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "default",
        walltime: float | None = None,
    ) -> None:
        """Log the distribution of ``values`` (TensorBoard's Histograms and Distributions tabs).

        Parameters
        ----------
        tag : str
            Name of the histogram series, e.g. ``'fc1/weight/grad'``.
        values : NDArray, numpy array, or sequence of numbers
            Any shape, any real dtype; flattened.  An NDArray is copied by MXNet's
            engine (any context, GPU included) and histogrammed in the sidecar.
            NaN and Inf are left out of the buckets and counted (``stats()``).
        global_step, walltime
            As for :meth:`add_scalar`.
        bins : 'default', int, sequence of edges, or a numpy rule name
            ``'default'``: TensorBoard's own buckets (edges +-1e-12 * 1.1**k), empty
            tails trimmed; an int: that many equal-width buckets over [min, max];
            increasing edges; or ``'auto'``, ``'fd'``, ``'doane'``, ``'scott'``,
            ``'stone'``, ``'rice'``, ``'sturges'``, ``'sqrt'`` (numpy's rules), capped at
            ``MAX_BINS`` buckets.
        """
        if type(tag) is not str or tag not in self._tags:
            self._tag(tag)
        if type(global_step) is not int or not 0 <= global_step <= INT64_MAX:
            global_step = check_step(global_step)
        wall = _now() if walltime is None else check_walltime(walltime)
        # TensorBoard's buckets, the usual choice, travel as no options at all (the
        # sidecar's default): no check per call here, no json.dumps in the completion
        # thread (which holds the GIL the training thread wants), no json.loads in the
        # sidecar; ~2 us each, 16 times a step in the heavy profile.
        options = None if type(bins) is str and bins == "default" else {"bins": check_bins(bins)}
        if is_ndarray(values):  # the short path: one engine push, nothing else
            self._pipe.submit_ndarray(
                _HISTOGRAM, tag, global_step, wall, values, self._ndarray("values", values), options
            )
            return
        part, arr = self._part("values", values)
        if arr is not None:
            check_histogram_values(arr)
        self._pipe.submit_array(_HISTOGRAM, tag, global_step, wall, [part], options=options)
