"""Precision-recall curves (``add_pr_curve``): labels, predictions, weights.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/pr_curve.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...wire.descriptors import Kind
from .. import arguments as v
from ._base import KindCalls

__all__ = ["PrCurveCalls"]


def check_pr_weights(arr: np.ndarray[Any, Any], name: str = "weights") -> None:
    """Finite and >= 0: one NaN weight makes every count NaN, a negative one a negative count."""
    if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr >= 0)):
        raise ValueError(f"{name} must be finite and >= 0")


class PrCurveCalls(KindCalls):
    def add_pr_curve(
        self,
        tag: str,
        labels: Any,
        predictions: Any,
        num_thresholds: int = 201,
        global_step: int | None = None,
        weights: Any = None,
        walltime: float | None = None,
    ) -> None:
        """Log a precision-recall curve (TensorBoard's PR Curves tab).

        Parameters
        ----------
        labels : NDArray or numpy array
            Ground truth, 0/1 or bool, any shape.
        predictions : NDArray or numpy array
            Probabilities in [0, 1], as many as ``labels``.
        num_thresholds : int
            Thresholds evenly spaced in [0, 1], from 2 to 10000 (no 127 clamp).
        weights : NDArray or numpy array, optional
            Per-example weights, as many as ``labels``.
        global_step, walltime
            As for :meth:`add_scalar`.
        """
        tag, step, wall = self._common(tag, global_step, walltime)
        if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, (int, np.integer)):
            raise TypeError(f"num_thresholds must be an int, got {type(num_thresholds).__name__}")
        if not 2 <= num_thresholds <= 10_000:
            raise ValueError(f"num_thresholds must be from 2 to 10000, got {num_thresholds}")
        lab, lab_arr = self._part("labels", labels)
        pred, pred_arr = self._part("predictions", predictions)
        parts = [lab, pred]
        sizes = {"labels": int(np.prod(lab.shape)), "predictions": int(np.prod(pred.shape))}
        if weights is not None:
            w, w_arr = self._part("weights", weights)
            sizes["weights"] = int(np.prod(w.shape))
            parts.append(w)
            if w_arr is not None:
                check_pr_weights(w_arr)
        if len(set(sizes.values())) != 1:
            raise ValueError(f"labels, predictions and weights must have as many elements each, got {sizes}")
        if pred_arr is not None:
            v.check_unit_range(pred_arr.astype(np.float64, copy=False), "predictions", 0.0, 1.0)
        if lab_arr is not None and not np.isin(lab_arr, (0, 1)).all():
            raise ValueError("labels must be 0 or 1 (or bool)")
        options = {"num_thresholds": int(num_thresholds)}
        self._pipe.submit_array(Kind.PR_CURVE, tag, step, wall, parts, options=options)
