"""What ``inspect`` found: the report of a log directory, per run, file and tag.

Plain data filled by :mod:`.reading` and shown by :mod:`.reporting` (or as JSON).
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..formats.proto import event_pb2, summary_pb2, types_pb2
from ..formats.records import RecordError, TruncatedRecord

EXIT_OK, EXIT_DAMAGED, EXIT_USAGE = 0, 1, 2


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
            "error": None if e is None else {"offset": e.offset, "message": describe_error(e)},
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


def describe_error(e: RecordError) -> str:
    prefix = f"record at byte {e.offset}: "
    s = str(e)
    return s[len(prefix) :] if s.startswith(prefix) else s
