"""Hyperparameters (``add_hparams``): this run's values, domains and final metrics.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/hparams.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...wire.descriptors import Kind
from .. import arguments as v
from ..arguments import short_repr
from ._base import KindCalls, _now

__all__ = ["HParamsCalls"]

HPARAM_TYPES = (bool, int, float, str)


def check_hparams(hparams: Any, name: str = "hparam_dict") -> dict[str, Any]:
    if not isinstance(hparams, dict) or not hparams:
        raise TypeError(f"{name} must be a non-empty dict of str to bool, int, float or str")
    out: dict[str, Any] = {}
    for k, value in hparams.items():
        v.check_tag(k, f"{name} key")
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, HPARAM_TYPES):
            raise TypeError(f"{name}[{k!r}] must be bool, int, float or str, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}[{k!r}] must be finite, got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                float(value)  # TensorBoard holds every number as a double
            except OverflowError:
                raise ValueError(
                    f"{name}[{k!r}] must be within the range of a float64, got {short_repr(value)}"
                ) from None
        if isinstance(value, str):
            v.check_text(value, f"{name}[{k!r}]")
        out[k] = value
    return out


class _Session:
    """This run's HParams session as TensorBoard will show it: what its first
    ``add_hparams`` declared, and the end written, if any.  TensorBoard keeps the first
    metadata of a tag in a run, whichever file holds it, so this outlives a sidecar
    restart and ``reopen()``: the writer's run stays the same run."""

    def __init__(self, hparams: dict[str, Any], metrics: dict[str, float], domains: dict[str, list[Any]]) -> None:
        self.hparams = hparams
        self.metric_names = set(metrics)
        self.domains = domains
        self.ended: str | None = None  # 'SUCCESS' or 'FAILURE' once the end is written

    def check_later_call(self, hparams: dict[str, Any], metrics: dict[str, float], domains: dict[str, Any]) -> None:
        """A later call may report new metric values and end the session; anything
        TensorBoard would not show (it keeps the first call's declarations) is refused."""
        changed = sorted(
            k
            for k in {*hparams, *self.hparams}
            if k not in hparams or k not in self.hparams or _typed(hparams[k]) != _typed(self.hparams[k])
        )
        if changed:
            detail = ", ".join(f"{k!r} ({_shown(hparams, k)}; first call: {_shown(self.hparams, k)})" for k in changed)
            raise ValueError(
                f"hparam_dict differs from this run's first add_hparams in {detail}; TensorBoard keeps a run's "
                "first hparams, so log other hparams to another run (another logdir)"
            )
        new = sorted(set(metrics) - self.metric_names)
        if new:
            raise ValueError(
                f"metric_dict names {', '.join(map(repr, new))}, which this run's first add_hparams did not; "
                "TensorBoard lists the metrics declared by the first call only, so declare every metric then"
            )
        if domains and domains != self.domains:
            raise ValueError(
                "hparam_domain_discrete differs from this run's first add_hparams; TensorBoard keeps the first"
            )


class HParamsCalls(KindCalls):
    _hparams_session: _Session | None

    def add_hparams(
        self,
        hparam_dict: dict[str, Any],
        metric_dict: dict[str, float],
        hparam_domain_discrete: dict[str, list[Any]] | None = None,
        global_step: int | None = None,
        status: str = "SUCCESS",
    ) -> None:
        """Log this run's hyperparameters and metrics for TensorBoard's HParams tab.

        Written into this writer's own run (not a new sub-run per call, the
        tensorboardX/torch complaint), so the metrics are this run's scalars.

        A run is one HParams session, and TensorBoard keeps what a run declares first.
        The first call declares the hparams, the metrics and the domains.  Later calls
        give the same ``hparam_dict`` (else ``ValueError`` naming what differs), metrics
        among those first declared, and may end the session: call with
        ``status='RUNNING'`` at the start and ``'SUCCESS'`` or ``'FAILURE'`` at the end.
        The first call with one of those two ends the session for good; a later call
        with another status raises ``ValueError``.  A ``'RUNNING'`` call writes no end
        (it would be final), so until the end TensorBoard shows the status as Unknown.

        Parameters
        ----------
        hparam_dict : dict of str to bool, int, float or str
        metric_dict : dict of str to number
            Each becomes a scalar with that tag at ``global_step`` and is listed as a
            metric of the experiment (a tag this run already logs gets one more point,
            so pass the final step, or name the metric apart, e.g. ``'final/accuracy'``).
        hparam_domain_discrete : dict of str to list, optional
            The values a hyperparameter can take (shown as a filter).
        status : 'SUCCESS', 'FAILURE' or 'RUNNING'
            The session's status; see above for what a later call may change.
        """
        hparams = check_hparams(hparam_dict)
        if not isinstance(metric_dict, dict):
            raise TypeError("metric_dict must be a dict of str to number")
        metrics = {
            v.check_tag(k, "metric_dict key"): v.check_number(x, f"metric_dict[{k!r}]") for k, x in metric_dict.items()
        }
        domains: dict[str, list[Any]] = {}
        if hparam_domain_discrete is not None and not isinstance(hparam_domain_discrete, dict):
            raise TypeError("hparam_domain_discrete must be a dict of hparam name to a list of values")
        for k, values in (hparam_domain_discrete or {}).items():
            if k not in hparams:
                raise ValueError(f"hparam_domain_discrete names {k!r}, which is not in hparam_dict")
            if not isinstance(values, (list, tuple)) or not values:
                raise TypeError(f"hparam_domain_discrete[{k!r}] must be a non-empty list")
            domains[k] = [check_hparams({k: x}, "hparam_domain_discrete")[k] for x in values]
            kinds = {_hparam_kind(x) for x in [*domains[k], hparams[k]]}
            if len(kinds) != 1:
                raise TypeError(f"hparam_domain_discrete[{k!r}] must hold values of the type of hparam_dict[{k!r}]")
        if status not in ("SUCCESS", "FAILURE", "RUNNING"):
            raise ValueError(f"status must be 'SUCCESS', 'FAILURE' or 'RUNNING', got {status!r}")
        step = v.check_step(global_step)
        session = self._hparams_session
        if session is None:
            session = _Session(hparams, metrics, domains)
        else:
            session.check_later_call(hparams, metrics, domains)
            domains = session.domains
        if session.ended is not None and status != session.ended:
            raise ValueError(
                f"status={status!r}, but this run's session already ended with {session.ended!r}; "
                "TensorBoard keeps a run's first end"
            )
        end = session.ended is None and status != "RUNNING"
        now = _now()
        options = {
            "hparams": hparams,
            "metrics": metrics,
            "domains": domains,
            "start_time": self._start_time,
            "end_time": now,
            "status": status,
            "start": self._hparams_session is None,
            "end": end,
        }
        # Recorded only once the item is queued: a refused call, or one dropped under
        # on_full='drop' (counted), declares nothing, and the next call declares again.
        if self._pipe.submit(Kind.HPARAMS, "_hparams_", step, now, options=options):
            self._hparams_session = session
            if end:
                session.ended = status


def _shown(hparams: dict[str, Any], name: str) -> str:
    return short_repr(hparams[name]) if name in hparams else "missing"


def _typed(x: Any) -> tuple[str, Any]:
    """A value as TensorBoard holds it: True and 1 differ (BOOL, FLOAT64), 1 and 1.0 do not."""
    return (_hparam_kind(x), x)


def _hparam_kind(x: Any) -> str:
    return "bool" if isinstance(x, bool) else "str" if isinstance(x, str) else "number"
