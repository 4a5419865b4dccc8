"""Where the sidecar's bytes go: one interface, so that the loop and the projector never
open files where they use them.

:class:`LocalDirectory` is the back end for a local log directory: event files are
appended in place, other files are written whole (a temporary name, fsync, rename) so
a reader sees the old file or the new one, never a prefix.  The remote back end
(``remote.py``: object stores, where nothing is appended) implements the same methods
over a local spool, and uses the hooks the loop calls at each ``flush_secs`` tick, at
``flush()`` and at close; the projector does not change.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

from .event_file import EventFile

__all__ = ["LocalDirectory"]


class LocalDirectory:
    """The log directory ``root``, with a run ``run`` in ``root/run`` ('' is the root)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def run_dir(self, run: str) -> str:
        return os.path.join(self.root, run) if run else self.root

    def open_event_file(self, run: str, *, wall_time: float, pid: int, index: int, suffix: str = "") -> EventFile:
        """A new event file in ``run``'s directory (created if missing)."""
        return EventFile(self.run_dir(run), wall_time=wall_time, pid=pid, index=index, suffix=suffix)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def read_text(self, path: str) -> str | None:
        """``path`` as UTF-8 text, or None if it does not exist (UnicodeDecodeError if not text)."""
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    @staticmethod
    def write_file(directory: str, name: str, chunks: Iterable[bytes]) -> str:
        """Write ``name`` whole or not at all: a reader (TensorBoard serving a config it
        cached) sees the old file or the new one, never a prefix."""
        path = os.path.join(directory, name)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the file from a TensorBoard run by another user
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return path

    # -- the loop's hooks: a remote back end seals and uploads here (output/remote.py) --
    def tick(self, files: Iterable[Any]) -> None:
        """Every ``flush_secs``, after the files are fsynced: nothing more to do locally."""

    def publish(self, files: Iterable[Any]) -> None:
        """At ``flush()``, after the files are written: locally they are visible already."""

    def close(self) -> None:
        """After every file is closed: nothing is left to send locally."""

    def stats(self) -> dict[str, Any] | None:
        return None

    @staticmethod
    def sync_dir(path: str) -> None:
        """Make the entries of directory ``path`` durable (renames included)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass  # some file systems cannot fsync a directory; rename order is all we get
        finally:
            os.close(fd)

    @staticmethod
    def check_inside(root: str, path: str) -> None:
        """TensorBoard resolves symlinks and refuses assets outside the config's directory;
        refuse here what it would refuse (a step directory symlinked elsewhere).  The
        path need not exist yet: realpath resolves the part that does."""
        real_root = os.path.realpath(root)
        real = os.path.realpath(path)
        if os.path.commonpath([real_root, real]) != real_root:
            raise ValueError(f"{path!r} resolves outside {root!r}; TensorBoard would not serve it")

    @staticmethod
    @contextlib.contextmanager
    def lock(path: str) -> Iterator[None]:
        """Serialise read-modify-write of a shared file in directory ``path`` among our
        own sidecars.  Other writers (mxboard, tensorboardX, torch) take no lock."""
        import fcntl

        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                pass  # e.g. NFS without flock on directories: proceed unlocked
            yield
        finally:
            os.close(fd)  # releases the lock
