"""``python -m mxsidecar inspect LOGDIR``: what a logdir holds, without TensorBoard.

For each run (a directory holding event files, named relative to the logdir, ``.``
for the logdir itself, as TensorBoard names them) it lists the event files and, per
tag, the kind of data, how many values, the step range, the first and last wall
time and, for scalars, the last value; also graphs, session logs (a SessionLog START
is what makes TensorBoard purge) and each file's ``file_version`` and writer.  Every
record's two CRCs are checked on the way:

* a **truncated tail** (the file ends inside a record) is what TensorBoard sees while
  a writer is mid-flush: reported, tolerated (exit status 0);
* a **damaged** record (a checksum mismatch, or a record that is not an ``Event``)
  stops the reading of that file, reports the record's byte offset, and makes the
  exit status 1; the other files are read all the same.

Usage errors (no such directory, no event files in it) exit with 2.  Projector
configs (``projector_config.pbtxt``) are listed with the files they name; a missing
file there is reported but does not change the exit status, which is about event
files only.

Rules follow TensorBoard's Python loader: an event file is any file whose name
contains ``tfevents``; files of a run are read in name order; a tag's kind is decided
by the first of its values that carries metadata (its plugin name) or is a legacy
``simple_value``/``histo``/``image``/``audio`` value, which TensorBoard migrates to
the ``scalars``/``histograms``/``images``/``audio`` plugins; a tag never given a plugin
is a plain ``tensor``.  Counts are of what the files hold: before TensorBoard's purges
and its reservoir sampling (which keeps, e.g., 10 images per tag).

Files are read in chunks of :data:`CHUNK_SIZE` through :class:`RecordParser`, a
sans-IO TFRecord reader that keeps only the unfinished record between chunks, so
memory stays at a chunk plus the largest record whatever the file's size.  This
module reads files only; it imports neither TensorBoard nor mxnet.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from crc32c import crc32c as _crc32c
from google.protobuf import message as pb_message
from google.protobuf import text_format

from ..formats.proto import event_pb2, projector_config_pb2
from ..formats.records import FOOTER_SIZE, HEADER_SIZE, Record, RecordError, TruncatedRecord
from .model import EmbeddingFile, FileReport, ProjectorReport, Report, RunReport
from .reporting import Progress

CHUNK_SIZE = 1 << 20  # bytes per read: the parser holds one chunk plus one unfinished record
PROJECTOR_CONFIG = "projector_config.pbtxt"  # TensorBoard's projector plugin's file name

_HEADER = struct.Struct("<QI")  # length, masked crc32c of the length
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8  # records.masked_crc32c's, inlined below: it runs twice per record


# -- records ------------------------------------------------------------------
class RecordParser:
    """TFRecords from bytes fed in pieces of any size, both CRCs checked (sans-IO).

    :meth:`feed` returns the records that the bytes fed so far complete; a record
    that straddles pieces waits in the buffer until its last byte arrives.  Offsets
    are positions in the whole stream (``start`` is the first byte's).

    A checksum mismatch raises :class:`~mxsidecar.formats.records.RecordError` with the bad
    record's offset, but only after every good record before it has been returned:
    if a call has records to return it returns them, and the next call (``feed`` or
    ``finish``) raises.  The parser never moves past a bad record.
    """

    def __init__(self, start: int = 0) -> None:
        self._buf = bytearray()
        self._pos = 0  # where the next record starts in _buf
        self._base = start  # stream offset of _buf[0]
        self._need = HEADER_SIZE  # bytes past _pos needed before parsing can progress

    @property
    def offset(self) -> int:
        """Stream offset of the next record: the end of the last whole one."""
        return self._base + self._pos

    @property
    def buffered(self) -> int:
        """Bytes received past the last whole record."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[Record]:
        if self._pos:
            del self._buf[: self._pos]  # O(1) for a bytearray's head
            self._base += self._pos
            self._pos = 0
        self._buf += data
        if len(self._buf) < self._need:
            return []  # still inside a record: don't rescan its header for every piece
        return self._drain()

    def finish(self) -> TruncatedRecord | None:
        """End of the stream: raise a pending RecordError, else describe the bytes of an
        unfinished record (returned, not raised: TensorBoard waits for the rest)."""
        left = self._drain()
        assert not left, "feed() returns every whole record"
        n = self.buffered
        if not n:
            return None
        if n < HEADER_SIZE:
            return TruncatedRecord(self.offset, f"{n} bytes left, a record header needs {HEADER_SIZE}")
        length, _ = _HEADER.unpack_from(self._buf, self._pos)
        return TruncatedRecord(self.offset, f"{n} of the {HEADER_SIZE + length + FOOTER_SIZE} bytes of a record")

    def _drain(self) -> list[Record]:
        out: list[Record] = []
        buf, pos, end, base = self._buf, self._pos, len(self._buf), self._base
        header, footer, crc = _HEADER.unpack_from, _CRC.unpack_from, _crc32c
        self._need = HEADER_SIZE
        with memoryview(buf) as view:
            while end - pos >= HEADER_SIZE:
                length, length_crc = header(buf, pos)
                c = crc(view[pos : pos + 8])
                if (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF != length_crc:
                    return self._damaged(out, pos, "length checksum mismatch")
                data_start = pos + HEADER_SIZE
                data_end = data_start + length
                if data_end + FOOTER_SIZE > end:
                    self._need = HEADER_SIZE + length + FOOTER_SIZE
                    break
                data = view[data_start:data_end]
                c = crc(data)
                if (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF != footer(buf, data_end)[0]:
                    return self._damaged(out, pos, "data checksum mismatch")
                out.append(Record(base + pos, bytes(data)))
                pos = data_end + FOOTER_SIZE
        self._pos = pos
        return out

    def _damaged(self, out: list[Record], pos: int, what: str) -> list[Record]:
        self._pos = pos  # stay on the bad record: the next call finds it again
        if out:
            return out
        raise RecordError(self._base + pos, what)


# -- reading ------------------------------------------------------------------
def is_event_file(name: str) -> bool:
    """TensorBoard's rule (``io_wrapper.IsTensorFlowEventsFile``)."""
    return "tfevents" in os.path.basename(name)


def scan_file(
    path: str,
    on_event: Callable[[event_pb2.Event], None],
    *,
    name: str | None = None,
    chunk_size: int = CHUNK_SIZE,
    on_bytes: Callable[[int], None] | None = None,
) -> FileReport:
    """Read the event file ``path`` chunk by chunk, calling ``on_event`` for every event
    up to the first damaged record, and ``on_bytes`` with the size of every chunk.

    Reads as many bytes as the file holds when opened: a file still growing is seen
    as it was then, perhaps with a truncated tail.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    report = FileReport(path if name is None else name)
    parser = RecordParser()
    left = 0
    try:
        with open(path, "rb", buffering=0) as f:
            left = report.size = os.fstat(f.fileno()).st_size
            while left > 0:
                chunk = f.read(min(chunk_size, left))
                if not chunk:  # cut shorter since it was opened
                    report.size -= left
                    left = 0
                    break
                left -= len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
                for rec in parser.feed(chunk):
                    _add_record(report, rec, on_event)
            report.truncated = parser.finish()
    except RecordError as e:
        report.error = e
    except OSError as e:
        report.error = RecordError(parser.offset, f"cannot read: {e.strerror or e}")
    if left and on_bytes is not None:
        on_bytes(left)  # not read: count it done, for the progress bar
    return report


def _add_record(report: FileReport, rec: Record, on_event: Callable[[event_pb2.Event], None]) -> None:
    try:
        ev = event_pb2.Event.FromString(rec.data)
    except pb_message.DecodeError as e:
        raise RecordError(rec.offset, f"checksums right but not an Event ({e})") from None
    report.records += 1
    if not report.file_version and ev.file_version:
        report.file_version = ev.file_version
    if not report.writer and ev.source_metadata.writer:
        report.writer = ev.source_metadata.writer
    on_event(ev)


def _walk(logdir: str, report: Report) -> tuple[dict[str, list[str]], list[str]]:
    """run -> its event files (sorted by name, as TensorBoard reads them); projector configs."""
    runs: dict[str, list[str]] = {}
    configs: list[str] = []

    def onerror(e: OSError) -> None:
        report.warnings.append(f"cannot list {e.filename}: {e.strerror}")

    for dirpath, dirnames, filenames in os.walk(logdir, onerror=onerror):
        dirnames.sort()
        names = sorted(n for n in filenames if is_event_file(n) and os.path.isfile(os.path.join(dirpath, n)))
        if names:
            runs[os.path.relpath(dirpath, logdir)] = [os.path.join(dirpath, n) for n in names]
        if PROJECTOR_CONFIG in filenames:
            configs.append(os.path.join(dirpath, PROJECTOR_CONFIG))
    return dict(sorted(runs.items())), configs


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _projector(config_path: str, logdir: str, run_dirs: set[str]) -> ProjectorReport:
    config_dir = os.path.dirname(config_path)
    rel_dir = os.path.relpath(config_dir, logdir)
    out = ProjectorReport(os.path.relpath(config_path, logdir), seen=rel_dir == "." or rel_dir in run_dirs)
    config = projector_config_pb2.ProjectorConfig()
    try:
        with open(config_path, encoding="utf-8") as f:
            text_format.Parse(f.read(), config)
    except (OSError, UnicodeDecodeError, text_format.ParseError) as e:
        out.error = str(e)
        return out
    real_dir = os.path.realpath(config_dir)
    for emb in config.embeddings:
        files = []
        for name, path in (
            ("tensor_path", emb.tensor_path),
            ("metadata_path", emb.metadata_path),
            ("bookmarks_path", emb.bookmarks_path),
            ("sprite.image_path", emb.sprite.image_path),
        ):
            if not path:
                continue
            # TensorBoard's _rel_to_abs_asset_path: relative to the config, never outside it
            full = os.path.realpath(os.path.join(real_dir, os.path.expanduser(path)))
            inside = os.path.commonpath([real_dir, full]) == real_dir
            files.append(EmbeddingFile(name, path, os.path.isfile(full), inside))
        out.embeddings.append((emb.tensor_name, files))
    return out


def inspect_logdir(logdir: str, *, chunk_size: int = CHUNK_SIZE, progress: Progress | None = None) -> Report:
    """Everything :mod:`mxsidecar.inspect` reports about ``logdir`` (a directory)."""
    report = Report(os.path.abspath(logdir))
    runs, configs = _walk(logdir, report)
    if progress is not None:
        progress.start(sum(_size(p) for paths in runs.values() for p in paths))
    on_bytes = None if progress is None else progress.advance
    for name, paths in runs.items():
        run_report = report.runs[name] = RunReport(name)
        for path in paths:
            rel = os.path.relpath(path, logdir)
            run_report.files.append(
                scan_file(path, run_report.add_event, name=rel, chunk_size=chunk_size, on_bytes=on_bytes)
            )
    if progress is not None:
        progress.close()
    report.projector = [_projector(c, logdir, set(runs)) for c in configs]
    return report
