"""Failure injection for tests and benchmarks; inert unless ``MXSIDECAR_FAULTS`` is set.

The sidecar reads the variable once at start (it inherits the trainer's environment)::

    MXSIDECAR_FAULTS='[{"at": "encode", "tag": "boom", "action": "kill"}]'

``at``: ``receive`` (a descriptor arrived), ``encode`` (about to encode an item),
``write`` (about to write buffered records to a file: ``kill``/``exit`` there first
write *half* the bytes, the crash that leaves a torn record), ``fsync`` (an event
file was just fsynced; its path is the note).  ``tag``: only items with this tag
(``write``, ``fsync``: the tag of the last item appended; omit for any).
``action``: ``kill`` (SIGKILL itself), ``exit`` (``os._exit(3)``), ``raise``
(``RuntimeError``, which the sidecar reports with its traceback), ``sleep``
(``seconds`` per matching item: a slow sidecar, for backpressure benchmarks),
``gate`` (wait until the file ``path`` exists, at most ``seconds``, default 60: a
sidecar stuck for exactly as long as a test wants, with no clock in the test),
``record`` (append one line ``<at> <tag> <note>`` to the file ``path``: a test
observes what the sidecar did, an fsync say, not only its effect on the file).
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


def hit(at: str, tag: str = "", fd: int = -1, data: bytes = b"", note: str = "") -> None:
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
        if action == "gate":
            deadline = time.monotonic() + float(f.get("seconds", 60.0))
            while not os.path.exists(f["path"]) and time.monotonic() < deadline:
                time.sleep(0.01)
            continue
        if action == "record":
            line = f"{at} {tag} {note}\n".encode()
            fd_out = os.open(f["path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd_out, line)  # one write of one line with O_APPEND: whole lines only
            finally:
                os.close(fd_out)
            continue
        if at == "write" and fd >= 0 and data:
            os.write(fd, data[: len(data) // 2])  # a torn record, as a crash mid-write leaves
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "exit":
            os._exit(3)
        elif action == "raise":
            raise RuntimeError(f"injected failure at {at} ({tag!r})")
