"""The event files of every run a sidecar writes, shared by the producers that write them.

One file per run, whoever writes it: producers logging to one run (a trainer and its
DataLoader workers, or writers of separate scripts) append to the same file, because
TensorBoard's Python loader follows only the newest file of a run.  The file is named
after the producer that first wrote the run.  Each producer is told (``Opened``) of
each file it writes, before any progress that covers what it holds.

A run's steps are tracked per tag: a tag whose step goes backwards (the usual cause:
two processes logging the same tag) is reported once per run and tag, to the
producer that wrote the backward step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from ..wire.descriptors import Notice, Opened
from .output.event_file import EventFile
from .output.storage import LocalDirectory
from .producers import Producer

__all__ = ["RunFiles"]


class RunFiles:
    """Every open event file of one sidecar, keyed by run (a path within its logdir)."""

    def __init__(self, output: LocalDirectory) -> None:
        self.output = output
        self.files: dict[str, EventFile] = {}  # run (within logdir) -> its event file
        self.last_steps: dict[str, dict[str, int]] = {}  # event file -> tag -> last step written
        self.backwards: set[tuple[str, str]] = set()  # (event file, tag) already reported

    def file(self, producer: Producer, run: str) -> EventFile:
        """The event file of ``producer``'s run ``run``, opened (and announced) on first use."""
        f: EventFile | None = producer.files.get(run)
        if f is not None:
            return f
        path = producer.run_path(run)
        f = self.files.get(path)
        if f is None:
            f = self.output.open_event_file(
                path, wall_time=time.time(), pid=producer.pid, index=producer.file_index, suffix=producer.suffix
            )
            self.files[path] = f
            producer.bytes_written += f.size  # the file's first record (file_version), written: its creator's
        if f.path not in producer.opened:
            # Before the Progress that covers anything written to it: the trainer's list
            # of this writer's files (export_scalars) outlives this process.
            producer.opened.append(f.path)
            producer.send(Opened(f.path).pack())
        producer.files[run] = f
        return f

    @staticmethod
    def announce(producers: Iterable[Producer], path: str) -> None:
        """A remote back end rolled a run onto a new spool file: every producer hears of it."""
        producers = list(producers)
        for p in producers:
            p.opened.append(path)
            p.send(Opened(path).pack())
        if len(producers) == 1:  # a URL logdir's sidecar is private: the new file's first record is its writer's
            try:
                producers[0].bytes_written += os.path.getsize(path)
            except OSError:
                pass

    def flush(self) -> None:
        """Hand every buffered record to the kernel: visible to TensorBoard, and safe
        if this process dies (not if the machine does: that is what fsync is for)."""
        for f in self.files.values():
            f.flush()

    def fsync(self) -> None:
        for f in self.files.values():
            f.fsync()
        self.output.tick(self.files.values())

    def fsync_files_of(self, producer: Producer) -> None:
        """A producer's close() promises its values on disk: fsync the files it wrote."""
        for f in self.files.values():
            if f.path in producer.opened:
                f.flush()
                f.fsync()

    def close(self) -> None:
        err: BaseException | None = None
        for f in self.files.values():
            try:
                f.close()
            except BaseException as exc:  # close every file even if one fails
                err = err or exc
        try:
            self.output.close()  # a remote back end uploads everything, or says what is left and where
        except BaseException as exc:
            err = err or exc
        if err is not None:
            raise err

    def step(self, producer: Producer, f: EventFile, tag: str, step: int, seq: int, kind: int) -> None:
        """Record ``tag``'s step in ``f``; report once per file and tag a step that goes
        backwards.  TensorBoard's data server drops a tag's points when its step goes
        backwards; the usual cause is two processes (workers) logging the same tag."""
        steps = self.last_steps.get(f.path)
        if steps is None:
            steps = self.last_steps[f.path] = {}
        last = steps.get(tag)
        steps[tag] = step
        if last is not None and step < last:
            self.report_backwards(producer, f, tag, step, last, seq, kind)

    def report_backwards(
        self, producer: Producer, f: EventFile, tag: str, step: int, last: int, seq: int, kind: int
    ) -> None:
        """Tell ``producer`` (once per file and tag) that ``tag``'s step went backwards."""
        if (f.path, tag) in self.backwards:
            return
        self.backwards.add((f.path, tag))
        reason = (
            f"step {step} written after step {last} in {os.path.dirname(f.path)}; TensorBoard drops "
            "points of a tag whose steps go backwards (several processes: give each its own tags); "
            "warned once per run and tag"
        )
        producer.send(Notice(seq, kind, tag, reason, written=True).pack())

    def forget_steps(self, f: EventFile) -> None:
        """``purge_step``: the steps from there on are logged again, not backwards."""
        self.last_steps.pop(f.path, None)
