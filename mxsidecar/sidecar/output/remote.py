"""A URL log directory: written to a local spool, uploaded whole, each byte once.

Object stores cannot append, and rewriting a growing object on every flush (what
tensorboardX and TensorFlow's S3 file system do) costs the square of the run's length.
Here an event file in the spool is *sealed* (closed, fsynced) and uploaded whole, once:

* at every ``flush_secs`` tick if it holds anything beyond its first event, so a value
  is visible remotely within ``flush_secs`` plus one upload;
* when it reaches ``ROLL_BYTES`` (64 MB: one PUT each, far below S3's 5 GB limit);
* at ``flush()`` (which then waits for the uploads) and at close.

The next value of that run starts a new file, whose name sorts after it (the roll
counter sits before the user's suffix, see :meth:`RollingEventFile._open`), beginning
with its own ``file_version`` event and each tag's plugin metadata again: every file is
a valid TensorBoard file on its own.  Other files (the projector's) are written whole in
the spool, then uploaded in the same queue, so assets reach the store before the
``projector_config.pbtxt`` naming them.  Uploaded files stay in the spool: a local copy,
and what ``export_scalars`` reads.  What a killed sidecar left un-uploaded goes up first
when the next one starts on the spool (``spool.py``).

Knobs for tests, read from the environment: ``MXSIDECAR_ROLL_BYTES`` and
``MXSIDECAR_UPLOAD_WAIT_SECS`` (how long ``flush()`` and close wait for uploads, 60 s:
below the trainer's default ``close(timeout=120)``, so the sidecar reports what is left
instead of being killed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from . import spool
from .event_file import EventFile
from .storage import LocalDirectory
from .uploader import Uploader

__all__ = ["RemoteDirectory", "RollingEventFile"]

ROLL_BYTES = int(os.environ.get("MXSIDECAR_ROLL_BYTES", 64 << 20))
UPLOAD_WAIT_SECS = float(os.environ.get("MXSIDECAR_UPLOAD_WAIT_SECS", 60.0))


class RollingEventFile:
    """What the loop sees as one run's event file: a sequence of sealed spool files."""

    def __init__(
        self, owner: RemoteDirectory, run: str, *, wall_time: float, pid: int, index: int, suffix: str
    ) -> None:
        self._owner = owner
        self._run = run
        self._pid = pid
        self._index = index
        self._suffix = suffix
        self._roll = 0
        self._wall_time = wall_time
        self._sealed_bytes = 0
        self._closed = False
        self._current: EventFile | None = self._open()
        self._sealed_path = self._current.path

    def _open(self) -> EventFile:
        # <index>.<roll> then the user's suffix: names of one sidecar sort in roll order
        # whatever the suffix, and a restarted sidecar's (index + 1, later time) after them.
        self._wall_time = max(self._wall_time, time.time())
        suffix = f".{self._roll:06d}{self._suffix}"
        f = self._owner.open_spool_file(self._run, self._wall_time, self._pid, self._index, suffix)
        self._roll += 1
        return f

    def _file(self) -> EventFile:
        if self._current is None:
            self._current = self._open()
            self._owner.on_open(self._current.path)
        return self._current

    @property
    def path(self) -> str:
        """The file being written, or the last one sealed."""
        return self._current.path if self._current is not None else self._sealed_path

    @property
    def size(self) -> int:
        return self._sealed_bytes + (self._current.size if self._current is not None else 0)

    @property
    def tags_with_metadata(self) -> set[str]:
        return self._file().tags_with_metadata

    @property
    def last_tag(self) -> str:
        return self._current.last_tag if self._current is not None else ""

    @last_tag.setter
    def last_tag(self, tag: str) -> None:
        self._file().last_tag = tag

    def append(self, event: bytes) -> None:
        f = self._file()
        f.append(event)
        if f.size + f.buffered >= ROLL_BYTES:
            self.seal()

    @property
    def room(self) -> float:
        f = self._file()
        return ROLL_BYTES - f.size - f.buffered

    def append_records(self, data: bytes, count: int) -> None:
        # The scalar fast path appends runs of records no longer than ``room`` allows
        # past the limit (one record), so files roll where append() would roll them.
        f = self._file()
        f.append_records(data, count)
        if f.size + f.buffered >= ROLL_BYTES:
            self.seal()

    def flush(self) -> None:
        if self._current is not None:
            self._current.flush()

    def fsync(self) -> None:
        if self._current is not None:
            self._current.fsync()

    def seal(self, force: bool = False) -> None:
        """Close the current file and queue it for upload, if it holds data (or ``force``)."""
        f = self._current
        if f is None or (f.records <= 1 and not force):
            return
        self._current = None
        f.close()
        self._sealed_bytes += f.size
        self._sealed_path = f.path
        self._owner.uploader.put(f.path)

    def close(self) -> None:
        if self._closed:
            return
        # Even a file with no value goes up: the run's first shows the run from the start,
        # as locally, and any file the trainer was told of (Opened) exists remotely too.
        self.seal(force=True)
        self._closed = True


class RemoteDirectory(LocalDirectory):
    """``root`` is the spool; what is written there reaches ``url`` through an :class:`Uploader`."""

    def __init__(
        self,
        spool_dir: str,
        url: str,
        storage_options: dict[str, Any],
        on_open: Callable[[str], None],
        owner: tuple[int, int],
    ) -> None:
        import fsspec

        super().__init__(spool_dir)
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
        # Claimed before any file is opened, so no other sidecar takes ours for a dead one's.
        self._live = spool.LiveLock(spool_dir, *owner)
        spool.write_url(spool_dir, url)
        self.uploader = Uploader(fs, spool_dir, root, url)
        self.recovered = spool.leftovers(spool_dir)  # a killed writer's files go up first, in order
        for path in self.recovered:
            self.uploader.put(path)
        self.on_open = on_open  # a rolled file was opened: the loop tells the trainer (Opened)
        self._closed = False

    def open_spool_file(self, run: str, wall_time: float, pid: int, index: int, suffix: str) -> EventFile:
        return EventFile(self.run_dir(run), wall_time=wall_time, pid=pid, index=index, suffix=suffix)

    def open_event_file(  # type: ignore[override]
        self, run: str, *, wall_time: float, pid: int, index: int, suffix: str = ""
    ) -> RollingEventFile:
        return RollingEventFile(self, run, wall_time=wall_time, pid=pid, index=index, suffix=suffix)

    def write_file(self, directory: str, name: str, chunks: Iterable[bytes]) -> str:  # type: ignore[override]
        path = LocalDirectory.write_file(directory, name, chunks)
        self.uploader.put(path)
        return path

    # -- the loop's hooks (LocalDirectory's do nothing) -----------------------
    def tick(self, files: Iterable[Any]) -> None:
        """Every ``flush_secs``: seal what holds data, so it is visible within ``flush_secs``."""
        for f in files:
            f.seal()

    def publish(self, files: Iterable[Any]) -> None:
        """``flush()``: seal everything and wait (bounded) until it is uploaded."""
        self.tick(files)
        self.uploader.wait(UPLOAD_WAIT_SECS)

    def close(self) -> None:
        """After the files are closed (sealed): upload all, or raise naming what is left."""
        if self._closed:
            return
        self._closed = True
        try:
            self.uploader.close(UPLOAD_WAIT_SECS)
        finally:
            self._live.release()  # what is left is a dead writer's now: the next one uploads it

    def stats(self) -> dict[str, Any]:
        return {**self.uploader.stats(), "recovered": len(self.recovered)}
