"""How ``inspect`` shows a report: tables for people, a progress bar on stderr."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from typing import IO

from .model import EmbeddingFile, FileReport, Report, describe_error


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
        return f"DAMAGED at byte {f.error.offset}: {describe_error(f.error)} (read stopped there)"
    if f.truncated is not None:
        return f"truncated tail at byte {f.truncated.offset} ({describe_error(f.truncated)}; still being written?)"
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
