"""The ``on_full`` policy: what a caller does when the queue or the arena is full.

A small state machine, pure: the clock and the wait are injected, so tests drive it
without threads, processes or sleeps (wandb's ``flow_control.py`` habit)::

    admit(reserve)
      |-- reserve() returns a reservation ............... ADMITTED (return it)
      '-- reserve() names the full limit ('max_queue' or 'slab_mb')
            |-- on_full='drop' ......................... DROPPED  (count (kind, tag); return None)
            '-- on_full='block'
                  |-- check() raises (sidecar died) .... FAILED   (propagate)
                  |-- deadline passed .................. TIMEOUT  (BackpressureTimeout naming the limit)
                  '-- wait(remaining), then reserve() again

``reserve`` and ``wait`` are called with the writer's lock held; ``wait`` is that
lock's ``Condition.wait``, woken when the sidecar reports progress or dies.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Literal, TypeVar

from ..errors import BackpressureTimeout

__all__ = ["ON_FULL", "FlowControl"]

ON_FULL = ("block", "drop")
OnFull = Literal["block", "drop"]
T = TypeVar("T")

_ADVICE = {
    "max_queue": "raise max_queue, log less often, or use on_full='drop'",
    "slab_mb": "raise slab_mb, log smaller arrays, or use on_full='drop'",
}


class FlowControl:
    """Admission of one item under the writer's ``on_full`` policy."""

    def __init__(
        self,
        on_full: OnFull,
        block_timeout: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, got {on_full!r}")
        self.on_full = on_full
        self.block_timeout = block_timeout
        self.clock = clock
        self.dropped: Counter[tuple[str, str]] = Counter()  # (kind, tag) -> items dropped
        self.blocked_seconds = 0.0
        self.blocked_calls = 0

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def admit(
        self,
        reserve: Callable[[], T | str],
        wait: Callable[[float | None], object],
        kind: str,
        tag: str,
        check: Callable[[], None] = lambda: None,
    ) -> T | None:
        """Return ``reserve()``'s reservation, waiting or dropping as the policy says."""
        got = reserve()
        if not isinstance(got, str):
            return got
        if self.on_full == "drop":
            self.dropped[(kind, tag)] += 1
            return None
        start = self.clock()
        deadline = None if self.block_timeout is None else start + self.block_timeout
        self.blocked_calls += 1
        try:
            while True:
                check()
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    raise BackpressureTimeout(
                        f"{kind} {tag!r} waited {self.block_timeout:g}s (block_timeout) for room: "
                        f"{got} is full; {_ADVICE[got]}"
                    )
                wait(remaining)
                got = reserve()
                if not isinstance(got, str):
                    return got
        finally:
            self.blocked_seconds += self.clock() - start
