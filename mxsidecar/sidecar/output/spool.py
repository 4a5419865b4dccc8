"""The spool's bookkeeping: what was uploaded, who is alive, what a dead sidecar left.

A spool directory holds, beside the files it mirrors:

* ``.mxsidecar-url``: the URL it mirrors (``python -m mxsidecar upload SPOOL`` reads it);
* ``.mxsidecar-uploaded``: one relative path per line, appended after each upload that
  succeeded.  A line lost in a crash only means that file is uploaded again, whole, with
  the same bytes: an object is never changed, only possibly put twice;
* ``.mxsidecar-live.<pid>.<index>``: held under ``flock`` by the sidecar writing the
  event files named ``...<pid>.<index>.<roll>...`` (``pid`` is its trainer's).  The
  kernel releases the lock when that process dies, however it dies.

A sidecar starting on a spool (the next writer on the same URL, a restarted sidecar) or
``python -m mxsidecar upload`` uploads every event file not in the list whose writer's
lock is free: its torn last record cut first (the dead sidecar may have been killed
mid-write), in name order, before anything new.  Files of a live writer are left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re

from ...formats.records import RecordError, iter_records

__all__ = ["MANIFEST", "URL_FILE", "LiveLock", "leftovers", "mark_uploaded", "read_url", "write_url"]

MANIFEST = ".mxsidecar-uploaded"
URL_FILE = ".mxsidecar-url"
_LIVE = ".mxsidecar-live.{pid}.{index:06d}"
# <time>.<host>.<pid>.<index>.<roll>: the host may hold dots, so pid, index and roll are
# taken from the right of the name (before the user's suffix, which is not digits-only).
_NAME = re.compile(r"^events\.out\.tfevents\.\d+\..+\.(\d+)\.(\d{6})\.\d{6}(?!\d)")


class LiveLock:
    """This sidecar's claim on the event files it names ``<pid>.<index>``."""

    def __init__(self, spool: str, pid: int, index: int) -> None:
        os.makedirs(spool, exist_ok=True)
        self.path = os.path.join(spool, _LIVE.format(pid=pid, index=index))
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self._fd)
            self._fd = -1


def _owner_alive(spool: str, pid: int, index: int) -> bool:
    path = os.path.join(spool, _LIVE.format(pid=pid, index=index))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases the lock if we took it
    with contextlib.suppress(OSError):
        os.unlink(path)  # a dead owner's: nobody will take it again
    return False


def write_url(spool: str, url: str) -> None:
    os.makedirs(spool, exist_ok=True)
    with open(os.path.join(spool, URL_FILE), "w", encoding="utf-8") as f:
        f.write(url + "\n")


def read_url(spool: str) -> str:
    with open(os.path.join(spool, URL_FILE), encoding="utf-8") as f:
        return f.read().strip()


def mark_uploaded(spool: str, local: str) -> None:
    with open(os.path.join(spool, MANIFEST), "a", encoding="utf-8") as f:
        f.write(os.path.relpath(local, spool) + "\n")


def _uploaded(spool: str) -> set[str]:
    try:
        with open(os.path.join(spool, MANIFEST), encoding="utf-8") as f:
            return {line.rstrip("\n") for line in f if line.endswith("\n")}  # a torn last line: not uploaded
    except FileNotFoundError:
        return set()


def _cut_torn_tail(path: str) -> bool:
    """Truncate ``path`` to its last whole record; False if it holds none (or is corrupt)."""
    with open(path, "rb") as f:
        data = f.read()
    end = 0
    try:
        for rec in iter_records(data, strict=False):
            end = rec.offset + 16 + len(rec.data)
    except RecordError:
        return False  # not ours to repair: leave it in the spool, never upload garbage
    if end == 0:
        return False
    if end < len(data):
        os.truncate(path, end)
    return True


def leftovers(spool: str) -> list[str]:
    """Event files a dead writer left un-uploaded in ``spool``, cut to whole records, in name order."""
    done = _uploaded(spool)
    found = []
    for top, dirs, files in os.walk(spool):
        dirs.sort()
        for name in sorted(files):
            m = _NAME.match(name)
            path = os.path.join(top, name)
            if m is None or os.path.relpath(path, spool) in done:
                continue
            if _owner_alive(spool, int(m.group(1)), int(m.group(2))):
                continue
            if _cut_torn_tail(path):
                found.append(path)
    # Name order within each run directory is what TensorBoard reads in; runs are independent.
    return sorted(found, key=lambda p: (os.path.dirname(p), os.path.basename(p)))
