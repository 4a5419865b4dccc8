"""Event files: TensorBoard's naming, the first event, appends of whole records.

This is the one place that opens event files.  Records are buffered in memory and
written with ``os.write`` on ``flush()``; if a write fails part-way (disk full, file
system gone) the file is truncated back to the end of the last whole record, so it
never holds a partial record followed by more records (invariant 7), and the error
propagates to the sidecar's caller.
"""

from __future__ import annotations

import os
import socket

from ...formats import records
from ...formats.proto import event_pb2
from .. import faults

__all__ = ["FILE_VERSION", "WRITER_NAME", "EventFile", "event_file_name", "first_event"]

FILE_VERSION = "brain.Event:2"
WRITER_NAME = "mxsidecar"
AUTO_FLUSH_BYTES = 1 << 20  # don't hold more than this in memory between deadlines


def event_file_name(wall_time: float, pid: int, index: int, suffix: str = "", host: str | None = None) -> str:
    """``events.out.tfevents.<10-digit time>.<host>.<pid>.<n><suffix>``, TensorBoard's own
    python writer's pattern (with ``n`` zero-padded).

    The zero-padded time makes names sort in creation order, which TensorBoard's
    DirectoryWatcher relies on when a run holds several files.
    """
    host = socket.gethostname() if host is None else host
    # The counter is zero-padded so that files made within one second (a restarted
    # sidecar, several writers) still sort in creation order: "10" < "9" otherwise.
    return f"events.out.tfevents.{int(wall_time):010d}.{host}.{pid}.{index:06d}{suffix}"


def first_event(wall_time: float) -> bytes:
    """``file_version`` 2 makes TensorBoard purge only on a SessionLog START, never on
    an out-of-order step (the mxboard/tensorboardX#6 trap)."""
    ev = event_pb2.Event(wall_time=wall_time, file_version=FILE_VERSION)
    ev.source_metadata.writer = WRITER_NAME
    return ev.SerializeToString()


class EventFile:
    """One event file of one run directory, appended by the sidecar only."""

    def __init__(self, run_dir: str, *, wall_time: float, pid: int, index: int, suffix: str = "") -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, event_file_name(wall_time, pid, index, suffix))
        # O_EXCL: never append to a file another writer made with the same name.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.size = 0  # bytes on disk, always at a record boundary
        self.records = 0
        self.tags_with_metadata: set[str] = set()  # plugin metadata goes on a tag's first value only
        self.last_tag = ""  # for failure injection at "write" (mxsidecar.sidecar.faults)
        self.append(first_event(wall_time))
        self.flush()

    @property
    def room(self) -> float:
        """Bytes this file takes before it is sealed and the next one opened: a local
        event file never is (a URL logdir's spool files are: ``remote.py``)."""
        return float("inf")

    @property
    def buffered(self) -> int:
        """Bytes appended but not yet written (``size`` counts those on disk)."""
        return self._pending_bytes

    def append(self, event: bytes) -> None:
        rec = records.frame(event)
        self._pending.append(rec)
        self._pending_bytes += len(rec)
        self.records += 1
        if self._pending_bytes >= AUTO_FLUSH_BYTES:
            self.flush()

    def append_records(self, data: bytes, count: int) -> None:
        """Append ``count`` whole records already framed (``records.frame``), joined:
        the scalar fast path (``sidecar/batch.py``) frames a run of values at once."""
        self._pending.append(data)
        self._pending_bytes += len(data)
        self.records += count
        if self._pending_bytes >= AUTO_FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write what is buffered; on failure, cut the file back to its last whole record."""
        if not self._pending:
            return
        pending = self._pending
        data = memoryview(b"".join(pending))
        self._pending = []
        self._pending_bytes = 0
        written = 0
        if faults.active:
            faults.hit("write", self.last_tag, self._fd, bytes(data))
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError:
            # Keep every record that made it whole (a full disk stops mid-batch), and
            # nothing after: never a partial record followed by more records.  (A
            # pending entry may hold several records: the lengths say where each ends.)
            whole = records.whole_records_length(data[:written])
            try:
                os.ftruncate(self._fd, self.size + whole)
                self.size += whole
            except OSError:
                pass
            raise
        self.size += written
        # Writes to a file whose name is gone (the logdir was deleted under us) succeed
        # and vanish with the last descriptor: a silent loss unless we look.
        if os.fstat(self._fd).st_nlink == 0:
            raise FileNotFoundError(f"event file {self.path} was deleted while being written")

    def fsync(self) -> None:
        self.flush()
        os.fsync(self._fd)
        if faults.active:
            faults.hit("fsync", self.last_tag, note=self.path)

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self.fsync()
        finally:
            os.close(self._fd)
            self._fd = -1
