"""Scalars (``add_scalar``, ``add_scalars``): numbers, and mxboard's named-curve forms.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/scalar.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...wire.descriptors import Kind
from .. import arguments as v
from ..capture import is_ndarray
from ._base import KindCalls, _now

__all__ = ["ScalarCalls"]

_SCALAR = Kind.SCALAR  # module globals: an attribute of a module or an enum costs a lookup per call
_INT64_MAX = v.INT64_MAX


class ScalarCalls(KindCalls):
    # -- scalars and text ----------------------------------------------------
    def add_scalar(self, tag: str, value: Any, global_step: int | None = None, walltime: float | None = None) -> None:
        """Log a scalar.

        Parameters
        ----------
        tag : str
            Name of the series, e.g. ``'train/loss'``.
        value : int, float, numpy scalar, one-element numpy array, or NDArray
            The value; NaN and Inf are logged as such.  A one-element NDArray (a
            ``loss``) is copied by MXNet's engine once it is computed: no
            ``asscalar()``, no wait in this call.
        global_step : int >= 0 or None
            The x coordinate; None means 0.
        walltime : float or None
            Seconds since the epoch; None means now.
        """
        # A float's whole path is three type tests, the clock and submit's put (about a
        # microsecond); any other argument takes the full checks below.
        if type(tag) is not str or tag not in self._tags:
            self._tag(tag)
        if type(global_step) is not int or not 0 <= global_step <= _INT64_MAX:
            global_step = v.check_step(global_step)
        wall = _now() if walltime is None else v.check_walltime(walltime)
        if type(value) is float:
            self._pipe.submit(_SCALAR, tag, global_step, wall, "", value)
            return
        if is_ndarray(value):
            self._pipe.submit_ndarray(_SCALAR, tag, global_step, wall, value, self._ndarray("value", value, 1))
            return
        if isinstance(value, (dict, list, tuple)):
            # mxboard: ('name', x) or {'name': x} draws named curves in one chart.
            if not isinstance(value, dict):
                if len(value) != 2:
                    raise ValueError(f"value as a tuple or list must be (name, number), got {len(value)} items")
                value = {value[0]: value[1]}
            self.add_scalars(tag, value, global_step, walltime)
            return
        self._pipe.submit(_SCALAR, tag, global_step, wall, "", v.check_number(value))

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: Mapping[str, Any],
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log several scalars in one chart: each key becomes the run
        ``<logdir>/<main_tag>/<key>`` and the chart is ``main_tag``, as in tensorboardX,
        but with no file handle or thread per key in the training process.

        Parameters
        ----------
        main_tag : str
            Chart name; also a directory under ``logdir``, so it must stay inside it
            (no '..', no leading '/').
        tag_scalar_dict : mapping of str to number
            Series name -> value; each name is a directory under ``logdir/main_tag``.
        global_step, walltime
            As for :meth:`add_scalar`.
        """
        v.check_run_name(main_tag, "main_tag")
        if not isinstance(tag_scalar_dict, Mapping):
            raise TypeError(f"tag_scalar_dict must be a mapping of str to number, got {type(tag_scalar_dict).__name__}")
        step = v.check_step(global_step)
        wall = _now() if walltime is None else v.check_walltime(walltime)
        items = [
            (f"{main_tag}/{v.check_run_name(k, 'tag_scalar_dict key')}", v.check_number(x, f"tag_scalar_dict[{k!r}]"))
            for k, x in tag_scalar_dict.items()
        ]  # every key and value checked before the first is enqueued
        for run, _ in items:
            if run not in self._runs:  # one stat per new run, not per call
                v.check_run_path(self._logdir, run, "main_tag/tag_scalar_dict key")
                self._runs.add(run)
        for run, number in items:
            self._pipe.submit(Kind.SCALAR, main_tag, step, wall, run=run, number=number)
