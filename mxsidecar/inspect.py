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

import argparse
import json
import math
import os
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from crc32c import crc32c as _crc32c
from google.protobuf import message as pb_message
from google.protobuf import text_format

from .proto import event_pb2, projector_config_pb2, summary_pb2, types_pb2
from .records import FOOTER_SIZE, HEADER_SIZE, Record, RecordError, TruncatedRecord

__all__ = [
    "CHUNK_SIZE",
    "EXIT_DAMAGED",
    "EXIT_OK",
    "EXIT_USAGE",
    "FileReport",
    "Progress",
    "RecordParser",
    "Report",
    "RunReport",
    "TagStats",
    "add_parser",
    "format_report",
    "inspect_logdir",
    "is_event_file",
    "run",
    "scan_file",
]

CHUNK_SIZE = 1 << 20  # bytes per read: the parser holds one chunk plus one unfinished record
PROJECTOR_CONFIG = "projector_config.pbtxt"  # TensorBoard's projector plugin's file name
EXIT_OK, EXIT_DAMAGED, EXIT_USAGE = 0, 1, 2

_HEADER = struct.Struct("<QI")  # length, masked crc32c of the length
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8  # records.masked_crc32c's, inlined below: it runs twice per record


# -- records ------------------------------------------------------------------
class RecordParser:
    """TFRecords from bytes fed in pieces of any size, both CRCs checked (sans-IO).

    :meth:`feed` returns the records that the bytes fed so far complete; a record
    that straddles pieces waits in the buffer until its last byte arrives.  Offsets
    are positions in the whole stream (``start`` is the first byte's).

    A checksum mismatch raises :class:`~mxsidecar.records.RecordError` with the bad
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


# -- what the records say -----------------------------------------------------
_LEGACY_KINDS = {"simple_value": "scalars", "histo": "histograms", "image": "images", "audio": "audio"}
_PLUGIN_KINDS = {"graphs": "graph"}  # any other plugin is a kind under its own name

_CONTENT_FORMATS = {
    types_pb2.DT_FLOAT: "<f",
    types_pb2.DT_DOUBLE: "<d",
    types_pb2.DT_HALF: "<e",
    types_pb2.DT_INT8: "<b",
    types_pb2.DT_UINT8: "<B",
    types_pb2.DT_INT16: "<h",
    types_pb2.DT_UINT16: "<H",
    types_pb2.DT_INT32: "<i",
    types_pb2.DT_UINT32: "<I",
    types_pb2.DT_INT64: "<q",
    types_pb2.DT_UINT64: "<Q",
    types_pb2.DT_BOOL: "<?",
}


def scalar_of(value: summary_pb2.Summary.Value) -> float | None:
    """The number of a scalar value (legacy ``simple_value`` or a one-element tensor)."""
    which = value.WhichOneof("value")
    if which == "simple_value":
        return float(value.simple_value)
    if which != "tensor":
        return None
    t = value.tensor
    if t.half_val:  # DT_HALF and DT_BFLOAT16 keep their bits in the low 16 of an int32
        bits = t.half_val[0] & 0xFFFF
        if t.dtype == types_pb2.DT_BFLOAT16:
            return float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])
        return float(struct.unpack("<e", struct.pack("<H", bits))[0])
    for vals in (t.float_val, t.double_val, t.int_val, t.int64_val, t.uint32_val, t.uint64_val, t.bool_val):
        if vals:
            return float(vals[0])
    fmt = _CONTENT_FORMATS.get(t.dtype)
    if fmt is not None and len(t.tensor_content) >= struct.calcsize(fmt):
        return float(struct.unpack_from(fmt, t.tensor_content)[0])
    return None


@dataclass
class TagStats:
    """One tag of one run, over all its files."""

    kind: str | None = None  # None until a value decides it (see the module's doc)
    count: int = 0
    step_min: int = 0
    step_max: int = 0
    first_wall_time: float = 0.0  # the earliest
    last_wall_time: float = 0.0  # the latest
    last_value: float | None = None  # scalars: the value read last

    def add(self, step: int, wall_time: float) -> None:
        if self.count == 0:
            self.step_min = self.step_max = step
            self.first_wall_time = self.last_wall_time = wall_time
        else:  # comparisons, not min()/max(): this runs once per value
            if step < self.step_min:
                self.step_min = step
            elif step > self.step_max:
                self.step_max = step
            if wall_time < self.first_wall_time:
                self.first_wall_time = wall_time
            elif wall_time > self.last_wall_time:
                self.last_wall_time = wall_time
        self.count += 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind or "tensor",
            "count": self.count,
            "step_min": self.step_min,
            "step_max": self.step_max,
            "first_wall_time": _json_number(self.first_wall_time),
            "last_wall_time": _json_number(self.last_wall_time),
        }
        if self.kind == "scalars":
            out["last_value"] = _json_number(self.last_value)
        return out


@dataclass
class FileReport:
    path: str  # relative to the logdir
    size: int = 0  # bytes read: the file's size when it was opened
    records: int = 0  # whole records with both CRCs right
    truncated: TruncatedRecord | None = None  # an unfinished last record
    error: RecordError | None = None  # damage: where reading stopped
    file_version: str = ""
    writer: str = ""

    @property
    def status(self) -> str:
        if self.error is not None:
            return "damaged"
        if self.truncated is not None:
            return "truncated"
        return "empty" if self.size == 0 else "ok"

    def to_json(self) -> dict[str, Any]:
        t, e = self.truncated, self.error
        return {
            "path": self.path,
            "size": self.size,
            "records": self.records,
            "status": self.status,
            "truncated": None if t is None else {"offset": t.offset, "bytes": self.size - t.offset},
            "error": None if e is None else {"offset": e.offset, "message": _what(e)},
            "file_version": self.file_version,
            "writer": self.writer,
        }


@dataclass
class RunReport:
    name: str
    files: list[FileReport] = field(default_factory=list)
    tags: dict[str, TagStats] = field(default_factory=dict)
    graphs: int = 0  # Event.graph_def
    meta_graphs: int = 0  # Event.meta_graph_def
    session_logs: Counter[str] = field(default_factory=Counter)  # status name -> count
    purge_steps: set[int] = field(default_factory=set)  # steps of SessionLog STARTs
    log_messages: int = 0

    def add_event(self, ev: event_pb2.Event) -> None:
        what = ev.WhichOneof("what")
        if what == "summary":
            step, wall_time = ev.step, ev.wall_time
            for value in ev.summary.value:
                self._add_value(step, wall_time, value)
        elif what == "graph_def":
            self.graphs += 1
        elif what == "meta_graph_def":
            self.meta_graphs += 1
        elif what == "session_log":
            status = ev.session_log.status
            self.session_logs[event_pb2.SessionLog.SessionStatus.Name(status)] += 1
            if status == event_pb2.SessionLog.START:
                self.purge_steps.add(ev.step)
        elif what == "tagged_run_metadata":  # TensorBoard's graphs plugin shows it under its tag
            stats = self.tags.setdefault(ev.tagged_run_metadata.tag, TagStats())
            stats.kind = stats.kind or "graph"
            stats.add(ev.step, ev.wall_time)
        elif what == "log_message":
            self.log_messages += 1

    def _add_value(self, step: int, wall_time: float, value: summary_pb2.Summary.Value) -> None:
        tag = value.tag or value.node_name  # TensorBoard's fallback for old tensor summaries
        stats = self.tags.get(tag)
        if stats is None:
            stats = self.tags[tag] = TagStats()
        if stats.kind is None:
            legacy = _LEGACY_KINDS.get(value.WhichOneof("value") or "")
            if legacy is not None:
                stats.kind = legacy
            elif value.HasField("metadata"):  # TensorBoard keeps a tag's first metadata only
                plugin = value.metadata.plugin_data.plugin_name
                stats.kind = _PLUGIN_KINDS.get(plugin, plugin) or "tensor"
        stats.add(step, wall_time)
        if stats.kind == "scalars":
            stats.last_value = scalar_of(value)

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [f.to_json() for f in self.files],
            "tags": {tag: s.to_json() for tag, s in sorted(self.tags.items())},
            "graphs": self.graphs,
            "meta_graphs": self.meta_graphs,
            "session_logs": dict(sorted(self.session_logs.items())),
            "purge_steps": sorted(self.purge_steps),
            "log_messages": self.log_messages,
        }


@dataclass
class EmbeddingFile:
    field: str  # tensor_path, metadata_path, bookmarks_path or sprite.image_path
    path: str  # as the config has it
    exists: bool
    inside: bool  # TensorBoard refuses paths that resolve outside the config's directory


@dataclass
class ProjectorReport:
    path: str  # of the config, relative to the logdir
    seen: bool  # in a directory TensorBoard's projector reads: a run's, or the logdir
    error: str = ""  # the config does not parse
    embeddings: list[tuple[str, list[EmbeddingFile]]] = field(default_factory=list)

    @property
    def missing(self) -> int:
        return sum(not f.exists or not f.inside for _, files in self.embeddings for f in files)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "seen_by_tensorboard": self.seen,
            "error": self.error or None,
            "embeddings": [
                {
                    "tensor_name": name,
                    "files": [vars(f).copy() for f in files],
                }
                for name, files in self.embeddings
            ],
        }


@dataclass
class Report:
    logdir: str
    runs: dict[str, RunReport] = field(default_factory=dict)
    projector: list[ProjectorReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # directories that could not be listed

    def files(self) -> list[FileReport]:
        return [f for r in self.runs.values() for f in r.files]

    @property
    def exit_status(self) -> int:
        if not self.runs:
            return EXIT_USAGE
        return EXIT_DAMAGED if any(f.error is not None for f in self.files()) else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        files = self.files()
        counts = Counter(f.status for f in files)
        return {
            "logdir": self.logdir,
            "exit_status": self.exit_status,
            "summary": {
                "runs": len(self.runs),
                "files": len(files),
                "bytes": sum(f.size for f in files),
                "records": sum(f.records for f in files),
                "ok": counts["ok"],
                "empty": counts["empty"],
                "truncated": counts["truncated"],
                "damaged": counts["damaged"],
            },
            "runs": {name: r.to_json() for name, r in self.runs.items()},
            "projector": [p.to_json() for p in self.projector],
            "warnings": self.warnings,
        }


def _json_number(x: float | None) -> float | str | None:
    """JSON has no NaN or Infinity: those become the strings Python's float() reads."""
    if x is None or math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _what(e: RecordError) -> str:
    prefix = f"record at byte {e.offset}: "
    s = str(e)
    return s[len(prefix) :] if s.startswith(prefix) else s


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


# -- progress -------------------------------------------------------------------
class Progress:
    """A one-line bar of bytes read on ``stream``, redrawn at most every ``interval`` s."""

    def __init__(
        self,
        stream: IO[str],
        *,
        interval: float = 0.1,
        width: int = 28,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.interval = interval
        self.width = width
        self.clock = clock
        self.total = 0
        self.done = 0
        self.draws = 0
        self._last = 0.0

    def start(self, total: int) -> None:
        self.total, self.done = total, 0
        self._draw()

    def advance(self, n: int) -> None:
        self.done += n
        if self.clock() - self._last >= self.interval:
            self._draw()

    def close(self) -> None:
        self._draw()
        self.stream.write("\n")
        self.stream.flush()

    def _draw(self) -> None:
        self._last = self.clock()
        self.draws += 1
        done = min(self.done, self.total)  # a file may have grown since it was sized
        frac = done / self.total if self.total else 1.0
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\rinspect [{bar}] {frac:4.0%} {_human(done)} / {_human(self.total)}")
        self.stream.flush()


# -- human output ---------------------------------------------------------------
def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _when(t: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return repr(t)


def _table(rows: list[list[str]], right: set[int], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _file_status(f: FileReport) -> str:
    if f.error is not None:
        return f"DAMAGED at byte {f.error.offset}: {_what(f.error)} (read stopped there)"
    if f.truncated is not None:
        return f"truncated tail at byte {f.truncated.offset} ({_what(f.truncated)}; still being written?)"
    return f.status


def _asset_status(f: EmbeddingFile) -> str:
    if not f.inside:
        return "OUTSIDE the config's directory (TensorBoard refuses it)"
    return "ok" if f.exists else "MISSING"


def format_report(report: Report) -> str:
    """The compact tables of ``inspect`` without ``--json``."""
    files = report.files()
    lines = [
        f"logdir {report.logdir}: {len(report.runs)} run(s), {len(files)} event file(s), "
        f"{_human(sum(f.size for f in files))}"
    ]
    lines += [f"warning: {w}" for w in report.warnings]
    for run in report.runs.values():
        lines += ["", f"run {run.name}"]
        rows = [["file", "size", "records", "version", "writer", "status"]]
        for f in run.files:
            name = f.path if run.name == "." else os.path.relpath(f.path, run.name)
            rows.append([name, _human(f.size), str(f.records), f.file_version or "-", f.writer or "-", _file_status(f)])
        lines += _table(rows, right={1, 2})
        if run.tags:
            rows = [["tag", "kind", "count", "steps", "first wall time", "last wall time", "last value"]]
            for tag, s in sorted(run.tags.items()):
                steps = str(s.step_min) if s.step_min == s.step_max else f"{s.step_min}..{s.step_max}"
                last = "" if s.kind != "scalars" or s.last_value is None else f"{s.last_value:.6g}"
                first_wall, last_wall = _when(s.first_wall_time), _when(s.last_wall_time)
                rows.append([tag, s.kind or "tensor", str(s.count), steps, first_wall, last_wall, last])
            lines += ["", *_table(rows, right={2, 3, 6})]
        extras = []
        if run.graphs:
            extras.append(f"graphs {run.graphs}")
        if run.meta_graphs:
            extras.append(f"meta graphs {run.meta_graphs}")
        for status, n in sorted(run.session_logs.items()):
            extras.append(f"session log {status} {n}")
        if run.purge_steps:
            extras.append("purge at step " + ", ".join(map(str, sorted(run.purge_steps))))
        if run.log_messages:
            extras.append(f"log messages {run.log_messages}")
        if extras:
            lines.append("  " + "; ".join(extras))
    if report.projector:
        lines += ["", "projector configs"]
        for p in report.projector:
            note = "" if p.seen else " (not in a run's directory: TensorBoard does not read it)"
            if p.error:
                lines.append(f"  {p.path}{note}: does not parse: {p.error}")
                continue
            lines.append(f"  {p.path}{note}: {len(p.embeddings)} embedding(s), {p.missing} missing file(s)")
            for name, efiles in p.embeddings:
                parts = [f"{ef.field} {ef.path} {_asset_status(ef)}" for ef in efiles]
                lines.append(f"    {name or '(no tensor name)'}: " + ("; ".join(parts) or "no files"))
    counts = Counter(f.status for f in files)
    lines += [
        "",
        f"{len(files)} event file(s): {counts['ok']} ok, {counts['empty']} empty, "
        f"{counts['truncated']} with a truncated tail (tolerated), {counts['damaged']} damaged",
    ]
    return "\n".join(lines)


# -- command line -----------------------------------------------------------------
def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``inspect`` on an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "inspect",
        help="summarize a logdir's runs, tags and record integrity, without TensorBoard",
        description=(
            "Summarize the event files under LOGDIR: per run, its files (record counts and integrity) "
            "and per tag the kind, count, step range, wall times and last scalar value. "
            "Exit status: 0 all files intact (a truncated tail is tolerated), 1 a file is damaged, "
            "2 usage error (no such directory, no event files)."
        ),
    )
    p.add_argument("logdir", metavar="LOGDIR", help="directory to walk for event files (names containing 'tfevents')")
    p.add_argument("--json", action="store_true", help="print a JSON report instead of tables")
    # --progress / --no-progress by hand: argparse.BooleanOptionalAction is 3.9+.
    p.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    logdir: str = args.logdir
    if not os.path.exists(logdir):
        err.write(f"inspect: no such directory: {logdir}\n")
        return EXIT_USAGE
    if not os.path.isdir(logdir):
        err.write(f"inspect: not a directory: {logdir}\n")
        return EXIT_USAGE
    show = args.progress if args.progress is not None else err.isatty()
    report = inspect_logdir(logdir, progress=Progress(err) if show else None)
    if not report.runs:
        err.write(f"inspect: no event files (names containing 'tfevents') under {logdir}\n")
        for w in report.warnings:
            err.write(f"inspect: warning: {w}\n")
        return EXIT_USAGE
    if args.json:
        out.write(json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n")
    else:
        out.write(format_report(report) + "\n")
    out.flush()
    return report.exit_status
