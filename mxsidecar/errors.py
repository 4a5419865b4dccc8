"""One exception hierarchy, named by whose fault it is (the h11 habit).

* ``ValueError`` / ``TypeError``: the caller's argument is wrong; raised in the caller's
  thread before anything is enqueued.
* :class:`SidecarError`: the sidecar process failed (crashed, was killed, hit an I/O
  error).  Sticky: once raised, every later call raises it again, chained to the
  sidecar's own traceback when it could send one.
* :class:`BackpressureTimeout`: ``on_full='block'`` waited ``block_timeout`` seconds
  for room; the message names the limit to raise.
"""

from __future__ import annotations

__all__ = ["BackpressureTimeout", "MxSidecarError", "RemoteTraceback", "SidecarError", "WriterClosed"]


class MxSidecarError(RuntimeError):
    """Base class of the errors mxsidecar raises on its own account."""


class RemoteTraceback(Exception):
    """The sidecar's traceback, carried as text and attached as ``__cause__``.

    The same trick as ``concurrent.futures.process._RemoteTraceback``: the remote
    exception object cannot cross the process boundary, its formatted text can.
    """

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return "\n\n--- sidecar traceback ---\n" + self.tb


class SidecarError(MxSidecarError):
    """The sidecar process died or failed; what it had not written is lost.

    ``returncode`` is the exit status (negative: killed by that signal), ``None``
    while the process is still alive (an error it reported before exiting).
    """

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


class BackpressureTimeout(MxSidecarError):
    """``on_full='block'`` waited ``block_timeout`` seconds without room."""


class WriterClosed(MxSidecarError, ValueError):
    """An ``add_*`` or ``flush`` on a writer that was already closed."""
