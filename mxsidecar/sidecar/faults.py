"""Failure injection for tests and benchmarks; inert unless ``MXSIDECAR_FAULTS`` is set.

The sidecar reads the variable once at start (it inherits the trainer's environment)::

    MXSIDECAR_FAULTS='[{"at": "encode", "tag": "boom", "action": "kill"}]'

``at``: ``receive`` (a descriptor arrived), ``encode`` (about to encode an item),
``write`` (about to write buffered records to a file: ``kill``/``exit`` there first
write *half* the bytes, the crash that leaves a torn record).  ``tag``: only items
with this tag (``write``: the tag of the last item appended; omit for any).
``action``: ``kill`` (SIGKILL itself), ``exit`` (``os._exit(3)``), ``raise``
(``RuntimeError``, which the sidecar reports with its traceback), ``sleep``
(``seconds`` per matching item: a slow sidecar, for backpressure benchmarks).
``after``: skip this many matches first.

The same idea as CPython's ``test_concurrent_futures/test_deadlock.py``, which makes
objects crash at each boundary: here the boundary is named instead, because the
sidecar never runs user code.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

__all__ = ["ENV", "active", "hit"]

ENV = "MXSIDECAR_FAULTS"
_faults: list[dict[str, Any]] = json.loads(os.environ.get(ENV) or "[]")
active = bool(_faults)


def hit(at: str, tag: str = "", fd: int = -1, data: bytes = b"") -> None:
    """Act on every fault configured for this point and tag."""
    for f in _faults:
        if f["at"] != at or f.get("tag") not in (None, tag):
            continue
        if f.get("after", 0) > 0:
            f["after"] -= 1
            continue
        action = f["action"]
        if action == "sleep":
            time.sleep(float(f.get("seconds", 0.01)))
            continue
        if at == "write" and fd >= 0 and data:
            os.write(fd, data[: len(data) // 2])  # a torn record, as a crash mid-write leaves
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "exit":
            os._exit(3)
        elif action == "raise":
            raise RuntimeError(f"injected failure at {at} ({tag!r})")
