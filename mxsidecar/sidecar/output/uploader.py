"""Whole-file uploads to an fsspec file system, one thread, in the order given.

::

    put(path) --> FIFO of spool files --> thread: fs.put_file(local, remote)
                                            | fails: same file again after a backoff
                                            |        (0.5 s, doubling to 30 s), the rest wait
                                            v
                                          next file

The FIFO is the order TensorBoard needs: its loader reads a run's event files in name
order and never goes back, so a file must never appear remotely before one that sorts
(and was sealed) before it.  A failed file blocks the ones behind it rather than let
them overtake.  Each file is uploaded once (again only if an attempt failed), never
rewritten, so the bytes sent stay the bytes written.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Any

from . import spool

__all__ = ["UploadError", "Uploader"]

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0


class UploadError(OSError):
    """Files sealed in the spool that could not be uploaded."""


class Uploader:
    def __init__(self, fs: Any, spool: str, remote_root: str, url: str) -> None:
        self.fs = fs
        self.spool = spool
        self.remote_root = remote_root.rstrip("/")
        self.url = url
        self._queue: deque[str] = deque()
        self._cond = threading.Condition()
        self._stop = False
        self.uploaded = 0
        self.bytes_uploaded = 0  # bytes of every successful upload
        self.bytes_sent = 0  # bytes of every attempt, failed ones included
        self.failed_attempts = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="mxsidecar-upload", daemon=True)
        self._thread.start()

    def remote_path(self, local: str) -> str:
        rel = os.path.relpath(local, self.spool).replace(os.sep, "/")
        return f"{self.remote_root}/{rel}"

    def put(self, local: str) -> None:
        with self._cond:
            self._queue.append(local)
            self._cond.notify_all()

    def pending(self) -> list[str]:
        with self._cond:
            return list(self._queue)

    def wait(self, timeout: float) -> bool:
        """Until every file put so far is uploaded (True), or ``timeout`` seconds (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self, timeout: float) -> None:
        """Upload everything, or raise :class:`UploadError` naming what is left and where."""
        done = self.wait(timeout)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
            left = list(self._queue)
        if not done and left:
            names = ", ".join(os.path.relpath(p, self.spool) for p in left)
            raise UploadError(
                f"{len(left)} files were not uploaded to {self.url} within {timeout:g} s "
                f"({self.last_error or 'the first attempt had not returned'}): {names}; "
                f"they are kept in the spool {self.spool}, and uploaded by the next writer on this URL "
                f"or by: python -m mxsidecar upload {self.spool}"
            )

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {
                "url": self.url,
                "spool": self.spool,
                "pending": [os.path.relpath(p, self.spool) for p in self._queue],
                "uploaded": self.uploaded,
                "bytes_uploaded": self.bytes_uploaded,
                "bytes_sent": self.bytes_sent,
                "failed_attempts": self.failed_attempts,
                "last_error": self.last_error,
            }

    def _run(self) -> None:
        delay = BACKOFF_FIRST
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if not self._queue:
                    return
                local = self._queue[0]
            try:
                size = os.path.getsize(local)
            except FileNotFoundError:
                size = -1  # removed from the spool before its turn (a failed projector write)
            if size >= 0:
                try:
                    self.bytes_sent += size
                    self.fs.put_file(local, self.remote_path(local))
                except Exception as exc:  # the file system's own errors: retry them all
                    with self._cond:
                        self.failed_attempts += 1
                        self.last_error = f"{type(exc).__name__}: {exc}"[:500]
                        if not self._stop:
                            self._cond.wait(delay)
                    if self._stop:
                        return
                    delay = min(delay * 2, BACKOFF_MAX)
                    continue
            delay = BACKOFF_FIRST
            if size >= 0:
                try:
                    spool.mark_uploaded(self.spool, local)
                except OSError:
                    pass  # unrecorded: a later recovery puts the same bytes again, harmlessly
            with self._cond:
                self._queue.popleft()
                if size >= 0:
                    self.uploaded += 1
                    self.bytes_uploaded += size
                self._cond.notify_all()
