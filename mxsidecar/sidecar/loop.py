"""The sidecar process: receive descriptors, encode, frame, append to event files.

Started by :mod:`mxsidecar.training.supervisor` as its own interpreter,
``python -m mxsidecar.sidecar --fd=N --arena='"NAME"' --logdir='"DIR"' ...``: never forked
from the trainer (MXNet's engine threads and CUDA do not survive ``fork``) and never
through multiprocessing's spawn (which would re-run the user's ``__main__``).  It
never imports mxnet.

Data flow::

    socket (descriptors, in seq order)
      |  recv, split frames                       (wire/framing.py)
      v
    ITEM  -> array view over the arena span -> encoders.<kind>.encode
          -> Summary.Value(s) -> Event -> records.frame -> EventFile of the run
    FLUSH -> write every buffered record to its file
    STATS -> StatsReply (counters, CPU, RSS)
    CLOSE -> fsync and close every file, exit 0
      |
      v  after each batch: Progress(done_seq) -> the trainer frees spans <= done_seq
    a new event file -> Opened(path), before any Progress covering what it holds

Lifetimes:
* EOF without CLOSE, or the parent gone (``getppid`` changed, or psutil says the
  recorded parent no longer exists with its recorded start time): the trainer died.
  Everything already received is written, files are fsynced, the arena is unlinked
  (its owner cannot do it any more), exit 0.
* SIGTERM: the same, the arena left to its owner.  SIGINT is ignored: Ctrl-C in the
  terminal reaches the whole process group, and the trainer decides what happens.
* Any exception: its traceback goes to the trainer as an ErrorReport, exit 1.
"""

from __future__ import annotations

import argparse
import os
import select
import time
from collections import Counter
from typing import Any

import numpy as np

from ..formats.proto import _runtime, event_pb2
from ..wire.arena import Arena
from ..wire.descriptors import SCALARS_OP, Descriptor, Kind, Notice, Op, Opened, Progress, StatsReply
from ..wire.framing import Channel, ChannelClosed
from . import faults
from .batch import write_scalars
from .encoders import encoder_for
from .encoders.scalar import event_bytes as scalar_event_bytes
from .output.event_file import EventFile
from .output.storage import LocalDirectory

__all__ = ["Sidecar"]


# The sidecar is the only process that encodes: which protobuf it runs matters (the
# pure-Python one is ~10-30x slower than upb/cpp; perf/bench_kinds.py measures it).
PROTOBUF = {"version": _runtime.VERSION, "implementation": _runtime.implementation()}

PARENT_CHECK_SECS = 1.0
REPORT_EVERY = 32  # items between progress reports within one received batch
REPORT_SECS = 0.005  # ... or this much time, whichever comes first


class Sidecar:
    """Receives, encodes and writes; one instance per sidecar process."""

    def __init__(self, channel: Channel, arena: Arena, args: argparse.Namespace, scheduling: str = "") -> None:
        self.channel = channel
        self.scheduling = scheduling  # what _lower_priority achieved, reported in stats()
        self.arena = arena
        self.logdir = args.logdir
        # Every byte written goes through it; with a URL, args.logdir is the local spool.
        self.output = LocalDirectory(args.logdir) if not args.remote else self._remote_output(args)
        self.flush_secs = args.flush_secs
        self.ppid = args.ppid
        self.parent_ctime = args.parent_ctime
        self.pid_for_names = args.ppid
        self.file_index = args.file_index
        self.suffix = args.suffix
        self.files: dict[str, EventFile] = {}
        self.done_seq = 0
        self.reported_seq = 0
        self.closed = False
        self.written: Counter[str] = Counter()  # kind name -> values written
        self.rejected: Counter[str] = Counter()  # tag -> items refused
        self.nonfinite: Counter[str] = Counter()  # tag -> NaN/Inf values left out of histograms
        self.busy: dict[str, float] = {}  # kind name -> seconds spent encoding and writing it
        self.next_fsync = time.monotonic() + self.flush_secs
        self.next_parent_check = time.monotonic() + PARENT_CHECK_SECS
        self._file("")  # the run exists (and shows in TensorBoard) from the start

    def _remote_output(self, args: argparse.Namespace) -> LocalDirectory:
        from .output.remote import RemoteDirectory

        return RemoteDirectory(
            args.logdir,
            args.remote,
            args.storage_options,
            lambda path: self._send(Opened(path).pack()),
            (args.ppid, args.file_index),  # what our event files are named with
        )

    # -- files ---------------------------------------------------------------
    def _file(self, run: str) -> EventFile:
        f = self.files.get(run)
        if f is None:
            f = self.output.open_event_file(
                run, wall_time=time.time(), pid=self.pid_for_names, index=self.file_index, suffix=self.suffix
            )
            self.files[run] = f
            # Before the Progress that covers anything written to it: the trainer's list
            # of this writer's files (export_scalars) outlives this process.
            self._send(Opened(f.path).pack())
        return f

    def flush_all(self) -> None:
        """Hand every buffered record to the kernel: visible to TensorBoard, and safe
        if this process dies (not if the machine does: that is what fsync is for)."""
        for f in self.files.values():
            f.flush()

    def fsync_all(self) -> None:
        for f in self.files.values():
            f.fsync()
        self.output.tick(self.files.values())
        self.next_fsync = time.monotonic() + self.flush_secs

    def close_all(self) -> None:
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

    # -- the loop ------------------------------------------------------------
    def run(self) -> None:
        """Serve until CLOSE, or until the parent is gone."""
        while not self.closed:
            timeout = max(0.0, min(self.next_fsync, self.next_parent_check) - time.monotonic())
            ready, _, _ = select.select([self.channel], [], [], timeout)
            if ready:
                try:
                    frames = self.channel.recv()
                except ChannelClosed:
                    self._parent_gone()
                    return
                last_report = time.monotonic()
                for i, frame in enumerate(frames, 1):
                    if frame[:1] == SCALARS_OP:
                        self.write_scalars(frame)  # a run of float scalars: sidecar/batch.py
                    else:
                        self.handle(Descriptor.unpack(frame))
                    if self.closed:
                        break
                    # Report inside a long batch too: a caller blocked on a full queue
                    # waits for one of these, not for the whole batch (~max_queue items).
                    if i % REPORT_EVERY == 0 or time.monotonic() - last_report > REPORT_SECS:
                        self.flush_all()
                        self._report()
                        last_report = time.monotonic()
                # Write through after every batch, before reporting it done: "done"
                # then means "in the kernel", so a sidecar crash loses only what it had
                # not yet reported (the trainer counts exactly that), and TensorBoard
                # sees values at once.  One write per batch; batches grow with load.
                self.flush_all()
                self._report()
            now = time.monotonic()
            if now >= self.next_fsync:
                self.fsync_all()
            if now >= self.next_parent_check:
                self.next_parent_check = now + PARENT_CHECK_SECS
                if not self._parent_alive():
                    self._parent_gone()
                    return

    def _report(self) -> None:
        if self.done_seq != self.reported_seq:
            self.reported_seq = self.done_seq
            self._send(Progress(self.done_seq).pack())

    def _send(self, payload: bytes) -> None:
        try:
            self.channel.send([payload])
        except ChannelClosed:
            pass  # the trainer is gone; EOF on the next recv ends the loop

    def handle(self, desc: Descriptor) -> None:
        if faults.active:
            faults.hit("receive", desc.tag)
        if desc.op == Op.ITEM:
            self.write_item(desc)
        elif desc.op == Op.FLUSH:
            self.flush_all()
            self.output.publish(self.files.values())
        elif desc.op == Op.STATS:
            self._report()
            self._send(StatsReply(desc.seq, self.stats()).pack())
        elif desc.op == Op.SKIP:
            # The trainer could not capture this value (its NDArray computation failed);
            # without a reason, the caller already got the exception and only the span
            # had to come back in order.
            if desc.text:
                self.rejected[desc.tag] += 1
                self._send(Notice(desc.seq, desc.kind, desc.tag, desc.text).pack())
        elif desc.op == Op.CLOSE:
            # What came before CLOSE is written (to the spool, for a URL): report it done
            # before uploads that may fail, so a failed upload is not counted as lost items.
            self.flush_all()
            self._report()
            self.close_all()
            self.closed = True
        else:  # pragma: no cover - Descriptor.unpack already rejects unknown ops
            raise ValueError(f"unexpected op {desc.op}")
        self.done_seq = desc.seq

    def write_scalars(self, frame: bytes) -> None:
        start = time.perf_counter()
        n, seq = write_scalars(frame, self._file)
        self.written["scalar"] += n
        self.busy["scalar"] = self.busy.get("scalar", 0.0) + time.perf_counter() - start
        self.done_seq = seq
        # A frame holds up to capture.SCALARS_PER_FRAME values: reporting after each
        # lets a caller blocked on a full queue refill it while we write the next one.
        # Written through first: "done" means "in the kernel".
        self.flush_all()
        self._report()

    def _arrays(self, desc: Descriptor) -> Any:
        """Views over the descriptor's span: one array, or a dict of its named parts."""
        if not desc.nbytes:
            return None
        parts = (desc.options or {}).get("parts")
        if parts is None:
            return np.frombuffer(self.arena.view(desc.offset, desc.nbytes), dtype=desc.dtype).reshape(desc.shape)
        out = {}
        for name, rel, dtype, shape in parts:
            n = int(np.prod(shape)) * np.dtype(dtype).itemsize
            out[name] = np.frombuffer(self.arena.view(desc.offset + rel, n), dtype=dtype).reshape(shape)
        return out

    def write_item(self, desc: Descriptor) -> None:
        start = time.perf_counter()
        try:
            self._write_item(desc)
        finally:
            name = Kind(desc.kind).name.lower()
            self.busy[name] = self.busy.get(name, 0.0) + time.perf_counter() - start

    def _write_item(self, desc: Descriptor) -> None:
        kind = desc.kind
        if kind == Kind.SESSION_START:
            self._session_start(desc)
            return
        if faults.active:
            faults.hit("encode", desc.tag)
        data = self._arrays(desc)
        try:
            if kind == Kind.SCALAR:
                # The hot kind skips protobuf objects (encoders/scalar.py, event_bytes).
                number = desc.number if data is None else float(data.reshape(-1)[0])
                f = self._file(desc.run)
                first = desc.tag not in f.tags_with_metadata
                if first:
                    f.tags_with_metadata.add(desc.tag)  # TensorBoard keeps only a tag's first metadata
                f.last_tag = desc.tag
                f.append(scalar_event_bytes(desc.wall_time, desc.step, desc.tag, number, first))
                self.written["scalar"] += 1
                return
            if kind == Kind.GRAPH:
                from .encoders import graph

                graph_def = graph.encode_graph(desc)
                self._append_event(
                    desc.run, event_pb2.Event(wall_time=desc.wall_time, step=desc.step, graph_def=graph_def)
                )
                self.written["graph"] += 1
                return
            if kind == Kind.EMBEDDING:
                from .output import projector

                projector.write_embedding(self.output, desc.run, desc, data)
                self.written["embedding"] += 1
                return
            values = encoder_for(kind)(desc, data)
        except ValueError as exc:
            # Invariant 5: a value only the sidecar could check (an NDArray's contents)
            # is refused whole, counted, and reported; nothing is half-written.
            self.rejected[desc.tag] += 1
            self._send(Notice(desc.seq, desc.kind, desc.tag, str(exc)).pack())
            return
        finally:
            del data  # drop the views into the span before the trainer reuses it
        name = Kind(kind).name.lower()
        for run, value, metadata, counts in values:
            if counts and counts.get("nonfinite"):
                n = counts["nonfinite"]
                if desc.tag not in self.nonfinite:  # the trainer warns once per tag
                    reason = f"{n} NaN/Inf values left out of the buckets (counted in stats())"
                    self._send(Notice(desc.seq, desc.kind, desc.tag, reason, written=True).pack())
                self.nonfinite[desc.tag] += n
            f = self._file(run)
            if metadata is not None and value.tag not in f.tags_with_metadata:
                f.tags_with_metadata.add(value.tag)  # TensorBoard keeps only a tag's first metadata
                value.metadata.CopyFrom(metadata)
            ev = event_pb2.Event(wall_time=desc.wall_time, step=desc.step)
            ev.summary.value.append(value)
            f.last_tag = desc.tag
            f.append(ev.SerializeToString())
            self.written[name] += 1

    def _append_event(self, run: str, ev: event_pb2.Event) -> None:
        self._file(run).append(ev.SerializeToString())

    def _session_start(self, desc: Descriptor) -> None:
        """``purge_step``: TensorBoard (file_version 2) purges on a *non-first*
        SessionLog START, dropping every event with step >= its step.  The first START
        a run ever shows only marks the session, so a run written by a writer that
        never logged one would not purge; writing START twice makes the second one
        always count, and on a run that already had a START both purge the same."""
        for _ in range(2):
            ev = event_pb2.Event(wall_time=desc.wall_time, step=desc.step)
            ev.session_log.status = event_pb2.SessionLog.START
            self._append_event(desc.run, ev)

    # -- parent watch --------------------------------------------------------
    def _parent_alive(self) -> bool:
        if os.getppid() != self.ppid:
            return False  # reparented: the trainer exited
        if self.parent_ctime:
            import psutil

            try:
                return bool(psutil.Process(self.ppid).create_time() == self.parent_ctime)
            except psutil.NoSuchProcess:
                return False
        return True

    def parent_gone_within(self, seconds: float) -> bool:
        """Whether the trainer is gone now or goes within ``seconds`` (after a SIGTERM,
        which may be killing it too).  Polls: nothing else reports a parent's death to
        a process that has stopped reading its channel."""
        deadline = time.monotonic() + seconds
        while self._parent_alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def _parent_gone(self) -> None:
        """The trainer died: keep everything received, make it durable, clean up."""
        self.close_all()
        self.arena.unlink()
        self.closed = True

    def stats(self) -> dict[str, Any]:
        import psutil

        proc = psutil.Process()
        cpu = proc.cpu_times()
        return {
            "done_seq": self.done_seq,
            "written": dict(self.written),
            "rejected": dict(self.rejected),
            "nonfinite": dict(self.nonfinite),
            "busy_seconds": {k: round(v, 6) for k, v in self.busy.items()},
            "bytes_written": sum(f.size for f in self.files.values()),
            "files": [f.path for f in self.files.values()],
            "uploads": self.output.stats(),
            "cpu_seconds": cpu.user + cpu.system,
            "rss_bytes": proc.memory_info().rss,
            "scheduling": self.scheduling,
            "protobuf": PROTOBUF,
        }
