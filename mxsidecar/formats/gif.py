"""GIF timing as browsers play it: the frame-delay schedule of ``add_video``.

A GIF frame's delay is a u16 of centiseconds, and browsers replace delays under 2 cs
with 10 cs.  Both halves of the video kind follow this one schedule:
``training/kinds/video.py`` checks a clip against it in the caller's thread, and
``sidecar/encoders/video.py`` writes it; two copies could disagree, and the caller
would then accept what the sidecar refuses.  Standard library only (the training side
imports it inside ``add_video``, as ``export_scalars`` imports the readers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

__all__ = ["MAX_FPS", "MAX_FRAME_CS", "MIN_FPS", "MIN_FRAME_CS", "frame_delays_cs", "overlong_still"]

MIN_FRAME_CS = 2  # browsers replace GIF delays under 2 cs with 10 cs
MAX_FRAME_CS = 65535  # the delay field is a u16 of centiseconds
MIN_FPS = 100 / MAX_FRAME_CS  # a frame of a slower clip would outlast the field
MAX_FPS = 100 / MIN_FRAME_CS  # faster clips play at this rate


def frame_delays_cs(fps: float, n: int) -> list[int]:
    """The delays of ``n`` frames at ``fps`` (a positive rate, at least ``MIN_FPS``).

    Frame ``i`` ends at the centisecond nearest ``(i + 1) / fps`` s: the clip keeps the
    rate asked for on average, where one rounded delay for every frame would play 30 fps
    at 33.3.  Above ``MAX_FPS`` every frame lasts ``MIN_FRAME_CS``.
    """
    period = max(float(MIN_FRAME_CS), 100.0 / fps)
    ends = [math.floor((i + 1) * period + 0.5) for i in range(n)]
    return [b - a for a, b in zip([0, *ends[:-1]], ends)]


def overlong_still(delays: Sequence[int], same: Callable[[int, int], bool]) -> tuple[int, int, int] | None:
    """The first run of identical frames that one GIF frame cannot hold, or None.

    GIF writers (Pillow) merge consecutive identical frames into one frame of their
    summed delay, which must fit ``MAX_FRAME_CS``.  ``same(t, s)``: frame ``t`` shows as
    frame ``s``.  Returns ``(first, last, centiseconds)`` of the run.
    """
    n, start = len(delays), 0
    for t in range(1, n + 1):
        if t < n and same(t, start):
            continue
        held = sum(delays[start:t])
        if held > MAX_FRAME_CS:
            return start, t - 1, held
        start = t
    return None
