"""Audio (``add_audio``): mono or stereo clips, float in [-1, 1] or int16.

The argument half of the kind: what a caller may pass, checked in the caller's thread;
``sidecar/encoders/audio.py`` is the other half (TensorBoard's format).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...wire.descriptors import Kind
from .. import arguments as v
from ..arguments import short_repr
from ._base import KindCalls

__all__ = ["AudioCalls"]


def audio_layout(shape: tuple[int, ...], name: str = "audio") -> str:
    """'frames' ([frames] or [frames, channels]) or 'channels_first' ([channels, frames])."""
    dims = [d for d in shape if d != 1] or [1]
    if len(dims) == 1:
        return "frames"
    if len(dims) == 2:
        squeezed = tuple(dims)
        if squeezed[1] == 2:
            return "frames"
        if squeezed[0] == 2:
            return "channels_first"
    raise ValueError(f"{name} must be mono [frames] or stereo [frames, 2] / [2, frames] (after squeezing "
                     f"dimensions of size 1), got shape {shape}")  # fmt: skip


# The WAV header holds the byte rate, sample_rate * channels * 2 bytes, in a u32.
MAX_SAMPLE_RATE = (2**32 - 1) // 4


def check_sample_rate(sample_rate: Any, name: str = "sample_rate") -> int:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
        raise TypeError(f"{name} must be an int from 1 to {MAX_SAMPLE_RATE}, got {type(sample_rate).__name__}")
    if not 1 <= sample_rate <= MAX_SAMPLE_RATE:
        raise ValueError(f"{name} must be from 1 to {MAX_SAMPLE_RATE} (a WAV header holds rate * 4 bytes "
                         f"of stereo 16-bit samples in a u32), got {short_repr(sample_rate)}")  # fmt: skip
    return int(sample_rate)


class AudioCalls(KindCalls):
    def add_audio(
        self,
        tag: str,
        audio: Any,
        sample_rate: int = 44100,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Log a clip for TensorBoard's Audio tab (16-bit PCM WAV, encoded in the sidecar).

        Parameters
        ----------
        audio : NDArray or numpy array
            Mono ``[frames]`` or stereo ``[frames, 2]`` / ``[2, frames]`` (dimensions of
            size 1 are squeezed); float in [-1, 1] or int16.
        sample_rate : int
            Samples per second, > 0.
        global_step, walltime
            As for :meth:`add_scalar`.
        """
        tag, step, wall = self._common(tag, global_step, walltime)
        sample_rate = check_sample_rate(sample_rate)

        def audio_dtype(dtype: str, name: str) -> None:
            if dtype not in ("float16", "float32", "float64", "int16"):
                raise TypeError(f"{name} must be float (values in [-1, 1]) or int16, got dtype {dtype}")

        part, arr = self._part("audio", audio, dtypes=audio_dtype)
        layout = audio_layout(part.shape)
        if arr is not None:
            v.check_unit_range(arr, "audio", -1.0, 1.0)
        options = {"sample_rate": int(sample_rate), "layout": layout}
        self._pipe.submit_array(Kind.AUDIO, tag, step, wall, [part], options=options)
