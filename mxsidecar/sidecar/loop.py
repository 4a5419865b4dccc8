"""The sidecar process: receive descriptors, encode, frame, append to event files.

Started by :mod:`mxsidecar.training.supervisor` as its own interpreter,
``python -m mxsidecar.sidecar --fd=N [--listen-fd=L] --logdir='"DIR"' ...``: never forked
from the trainer (MXNet's engine threads and CUDA do not survive ``fork``) and never
through multiprocessing's spawn (which would re-run the user's ``__main__``).  It
never imports mxnet.

Data flow::

    --fd: the producer that started us     --listen-fd: the node address (handshake.py)
      |                                       |  accept, Hello -> Welcome (producers.py)
      v                                       v
    select() over every producer's socket (descriptors, in each producer's seq order)
      |  recv, split frames                       (wire/framing.py)
      v
    ITEM  -> array view over the producer's arena span -> encoders.<kind>.encode
          -> Summary.Value(s) -> Event -> records.frame -> EventFile of the run
    FLUSH -> write every buffered record to its file
    STATS -> StatsReply (that producer's counters, the process's CPU and RSS)
    CLOSE -> fsync that producer's files, Progress, Goodbye; the last one: close all, exit
      |
      v  after each batch: Progress(done_seq) -> that producer frees spans <= done_seq
    a new event file -> Opened(path), before any Progress covering what it holds

Producers share the event file of a run they both write, and nothing else (``runs.py``).

Lifetimes:
* A producer's EOF without CLOSE, or its process gone (pid and start time, checked
  every second: a forked child may hold its socket open): it died.  What it sent is
  written, files are fsynced, its segment is unlinked (its owner cannot do it any more).
* The last producer gone (closed or dead): the node address is closed first (a producer
  connecting now starts a new sidecar), every file is closed, exit 0.
* SIGTERM: the same, the segments left to their owners.  SIGINT is ignored: Ctrl-C in
  the terminal reaches the whole process group, and the trainers decide what happens.
* Any exception: its traceback goes to every producer as an ErrorReport, exit 1.
"""

from __future__ import annotations

import argparse
import os
import select
import selectors
import socket
import time
import traceback
from typing import Any

import numpy as np

from ..formats.proto import _runtime, event_pb2
from ..wire.descriptors import SCALARS_OP, Descriptor, ErrorReport, Kind, Notice, Op, StatsReply
from ..wire.framing import Channel, ChannelClosed
from ..wire.handshake import Goodbye
from . import faults
from .batch import write_scalars
from .encoders import encoder_for
from .encoders.scalar import event_bytes as scalar_event_bytes
from .output.storage import LocalDirectory
from .producers import Producer, accept_producer
from .runs import RunFiles

__all__ = ["Sidecar"]


# The sidecar is the only process that encodes: which protobuf it runs matters (the
# pure-Python one is ~10-30x slower than upb/cpp; perf/bench_kinds.py measures it).
PROTOBUF = {"version": _runtime.VERSION, "implementation": _runtime.implementation()}

PRODUCER_CHECK_SECS = 1.0
RECORD_OVERHEAD = 16  # a TFRecord's length, its CRC and the data's CRC
REPORT_EVERY = 32  # items between progress reports within one received batch
REPORT_SECS = 0.005  # ... or this much time, whichever comes first


class Sidecar:
    """Receives, encodes and writes for every producer; one instance per sidecar process."""

    def __init__(
        self,
        first: Producer,
        args: argparse.Namespace,
        scheduling: str = "",
        listener: socket.socket | None = None,
    ) -> None:
        self.scheduling = scheduling  # what _lower_priority achieved, reported in stats()
        self.logdir = args.logdir
        self.listener = listener  # the node address; None: this sidecar serves its starter only
        # epoll where there is one: select() fails past fd 1023, and a node sidecar may
        # serve many producers (a pool's workers, each task's writer).
        self.selector = selectors.DefaultSelector()
        if listener is not None:
            self.selector.register(listener, selectors.EVENT_READ, None)
        self.producers: dict[int, Producer] = {}
        # Producers that left without CLOSE while alive: their segments are theirs to
        # unlink, unless they die before we exit.
        self.orphans: list[Producer] = []
        self.closed = False
        self.term_requested = False  # SIGTERM to a node sidecar (process.py): take no new writers
        self.served = 0  # producers ever served
        self.ended_without_close = 0  # ... whose connection ended without CLOSE (died, or killed)
        self.flush_secs = first.flush_secs
        self.next_fsync = time.monotonic() + self.flush_secs
        self.next_producer_check = time.monotonic() + PRODUCER_CHECK_SECS
        # Every byte written goes through it; with a URL, args.logdir is the local spool.
        self.output = LocalDirectory(args.logdir) if not args.remote else self._remote_output(args, first)
        self.runs = RunFiles(self.output)
        self.add(first)

    def _remote_output(self, args: argparse.Namespace, first: Producer) -> LocalDirectory:
        from .output.remote import RemoteDirectory

        return RemoteDirectory(
            args.logdir,
            args.remote,
            args.storage_options,
            lambda path: self.runs.announce(self.producers.values(), path),
            (first.pid, first.file_index),  # what our event files are named with
        )

    def add(self, producer: Producer) -> None:
        self.producers[producer.fileno()] = producer
        self.selector.register(producer.channel.sock, selectors.EVENT_READ, producer)
        self.served += 1
        if producer.flush_secs < self.flush_secs:  # the most demanding producer sets the pace
            self.flush_secs = producer.flush_secs
            self.next_fsync = min(self.next_fsync, time.monotonic() + self.flush_secs)
        self.runs.file(producer, "")  # the run exists (and shows in TensorBoard) from the start
        if producer.pending:
            frames, producer.pending = producer.pending, []
            self._handle_batch(producer, frames)

    # -- files ---------------------------------------------------------------
    def flush_all(self) -> None:
        self.runs.flush()

    def fsync_all(self) -> None:
        self.runs.fsync()
        self.next_fsync = time.monotonic() + self.flush_secs

    def close_all(self) -> None:
        self.runs.close()

    # -- the loop ------------------------------------------------------------
    def run(self) -> None:
        """Serve until the last producer has closed or died."""
        while not self.closed:
            timeout = max(0.0, min(self.next_fsync, self.next_producer_check) - time.monotonic())
            for key, _ in self.selector.select(timeout):
                p = key.data
                if p is None:
                    self._accept()
                elif self.producers.get(p.fileno()) is p:  # not dropped earlier in this round
                    self._serve(p)
                if self.closed:
                    return
            if self.term_requested:
                self.term_requested = False
                self._close_listener()  # a writer connecting from now on starts a new sidecar
                self.fsync_all()
            now = time.monotonic()
            if now >= self.next_fsync:
                self.fsync_all()
            if now >= self.next_producer_check:
                self.next_producer_check = now + PRODUCER_CHECK_SECS
                for p in [p for p in self.orphans if not p.alive()]:
                    p.arena.unlink()
                    self.orphans.remove(p)
                for p in [p for p in self.producers.values() if not p.alive()]:
                    self._drain(p)
                    if self.closed:
                        return

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except OSError:  # the peer gave up between connect and accept
            return
        conn.setblocking(True)
        producer = accept_producer(Channel(conn), os.getpid())
        if producer is not None:
            self.add(producer)

    def _welcome_joiners(self) -> None:
        """A writer joining waits for its Welcome (its constructor does): answer it
        between two items, not after the whole backlog of the producer being served."""
        if self.listener is not None and select.select([self.listener], [], [], 0)[0]:
            self._accept()

    def _serve(self, p: Producer) -> None:
        """Handle what one producer sent: a batch of frames, in its seq order."""
        try:
            frames = p.channel.recv()
        except ChannelClosed:
            self._producer_gone(p)
            return
        self._handle_batch(p, frames)

    def _handle_batch(self, p: Producer, frames: list[bytes]) -> None:
        last_report = time.monotonic()
        for i, frame in enumerate(frames, 1):
            if frame[:1] == SCALARS_OP:
                self.write_scalars(p, frame)  # a run of float scalars, reported: sidecar/batch.py
                self._welcome_joiners()
                continue
            desc = Descriptor.unpack(frame)
            if desc.op == Op.CLOSE:
                self._close_producer(p, desc.seq)
                return
            self.handle(p, desc)
            # Report inside a long batch too: a caller blocked on a full queue
            # waits for one of these, not for the whole batch (~max_queue items).
            if i % REPORT_EVERY == 0 or time.monotonic() - last_report > REPORT_SECS:
                self.flush_all()
                p.report()
                self._welcome_joiners()
                last_report = time.monotonic()
        # Write through after every batch, before reporting it done: "done" then
        # means "in the kernel", so a sidecar crash loses only what it had not yet
        # reported (the trainer counts exactly that), and TensorBoard sees values at
        # once.  One write per batch; batches grow with load.
        self.flush_all()
        p.report()

    def _drain(self, p: Producer) -> None:
        """A producer whose process is gone while its socket is not (a forked child holds
        it): take what it sent, then let it go."""
        sock = p.channel.sock
        sock.setblocking(False)
        try:
            while p.fileno() in self.producers:
                self._handle_batch(p, p.channel.recv())
        except (BlockingIOError, ChannelClosed):
            pass
        if p.fileno() in self.producers and self.producers[p.fileno()] is p:
            self._producer_gone(p)

    def _remove(self, p: Producer) -> bool:
        """Forget ``p``; True if it was the last producer (the node address is closed
        then, before anything else: a producer that connects from now on starts a new
        sidecar instead of joining one that is leaving)."""
        del self.producers[p.fileno()]
        self.selector.unregister(p.channel.sock)
        if self.producers:
            return False
        self._close_listener()
        return True

    def _close_listener(self) -> None:
        if self.listener is not None:
            self.selector.unregister(self.listener)
            self.listener.close()
            self.listener = None

    def _close_producer(self, p: Producer, seq: int) -> None:
        """CLOSE: everything before it is written; its files are fsynced (the last
        producer's close closes every file and uploads); then Goodbye."""
        p.done_seq = seq
        # What came before CLOSE is written (to the spool, for a URL): report it done
        # before uploads that may fail, so a failed upload is not counted as lost items.
        self.flush_all()
        p.report()
        # CLOSE means the producer is done with its segment; it unlinks it after our
        # Goodbye, but one killed in between (a pool worker SIGTERMed in the middle of
        # its finalizer's close) would leave it behind.  The name goes now, the mapping
        # stays; the producer's own unlink finds nothing and is fine with that.
        p.arena.unlink()
        last = self._remove(p)
        if last:
            try:
                self.close_all()
            except BaseException:
                # It is no longer among the producers that fail() reaches.
                p.send(ErrorReport(traceback.format_exc()).pack())
                raise
            self.closed = True
        else:
            self.runs.fsync_files_of(p)
            self._idle_again()
        p.send(Goodbye(last).pack())
        p.close()

    def _idle_again(self) -> None:
        """A closing producer lifts SCHED_IDLE (``Supervisor._hurry``) so that its close()
        does not wait behind other work; the producers still training want it back."""
        if self.scheduling.startswith("idle") and hasattr(os, "SCHED_IDLE"):
            try:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # lowering is always permitted
            except OSError:
                pass

    def _producer_gone(self, p: Producer) -> None:
        """A producer died: keep everything it sent, make it durable, clean up after it."""
        self.ended_without_close += 1
        self.flush_all()
        # Its owner cannot unlink its segment any more, unless it is alive: a writer that
        # disconnected without CLOSE (after an error, or one that gave up joining us and
        # serves itself with the same segment) keeps it.  A killed process's socket
        # closes as it exits: give it a moment to be gone.
        if p.gone_within(0.2):
            p.arena.unlink()
        else:
            self.orphans.append(p)  # unlinked if its process dies while we run
        if self._remove(p):
            self.close_all()
            self.closed = True
        else:
            self.runs.fsync_files_of(p)
        p.close()

    def terminate(self, grace: float) -> None:
        """SIGTERM: close every file; unlink the segment of each producer that the same
        signal killed (gone within ``grace`` seconds), leave the others to their owners."""
        self._close_listener()
        self.close_all()
        for p in self.producers.values():
            if p.gone_within(grace):
                p.arena.unlink()

    def fail(self, traceback_text: str) -> None:
        """Every producer gets the traceback (each then raises one SidecarError)."""
        for p in self.producers.values():
            p.send(ErrorReport(traceback_text).pack())

    def handle(self, p: Producer, desc: Descriptor) -> None:
        if faults.active:
            faults.hit("receive", desc.tag)
        if desc.op == Op.ITEM:
            self.write_item(p, desc)
        elif desc.op == Op.FLUSH:
            self.flush_all()
            self.output.publish(self.runs.files.values())
        elif desc.op == Op.STATS:
            p.report()
            p.send(StatsReply(desc.seq, self.stats(p)).pack())
        elif desc.op == Op.SKIP:
            # The trainer could not capture this value (its NDArray computation failed);
            # without a reason, the caller already got the exception and only the span
            # had to come back in order.
            if desc.text:
                p.rejected[desc.tag] += 1
                p.send(Notice(desc.seq, desc.kind, desc.tag, desc.text).pack())
        else:  # pragma: no cover - Descriptor.unpack already rejects unknown ops
            raise ValueError(f"unexpected op {desc.op}")
        p.done_seq = desc.seq

    def write_scalars(self, p: Producer, frame: bytes) -> None:
        """A SCALARS frame (a run of float scalars, sidecar/batch.py) of producer ``p``."""
        start = time.perf_counter()
        n, seq, nbytes = write_scalars(
            frame, lambda run: self.runs.file(p, run), self.runs.last_steps, self._went_back(p)
        )
        p.written["scalar"] += n
        p.bytes_written += nbytes
        p.busy["scalar"] = p.busy.get("scalar", 0.0) + time.perf_counter() - start
        p.done_seq = seq
        # A frame holds up to the pipeline's frame_values (half its max_queue): reporting
        # after each lets a caller blocked on a full queue refill it while we write the next.
        # Written through first: "done" means "in the kernel".
        self.flush_all()
        p.report()

    def _went_back(self, p: Producer) -> Any:
        def report(f: Any, tag: str, step: int, last: int, seq: int) -> None:
            self.runs.report_backwards(p, f, tag, step, last, seq, Kind.SCALAR)

        return report

    def _arrays(self, p: Producer, desc: Descriptor) -> Any:
        """Views over the descriptor's span: one array, or a dict of its named parts."""
        if not desc.nbytes:
            return None
        parts = (desc.options or {}).get("parts")
        if parts is None:
            return np.frombuffer(p.arena.view(desc.offset, desc.nbytes), dtype=desc.dtype).reshape(desc.shape)
        out = {}
        for name, rel, dtype, shape in parts:
            n = int(np.prod(shape)) * np.dtype(dtype).itemsize
            out[name] = np.frombuffer(p.arena.view(desc.offset + rel, n), dtype=dtype).reshape(shape)
        return out

    def write_item(self, p: Producer, desc: Descriptor) -> None:
        start = time.perf_counter()
        try:
            self._write_item(p, desc)
        finally:
            name = Kind(desc.kind).name.lower()
            p.busy[name] = p.busy.get(name, 0.0) + time.perf_counter() - start

    def _write_item(self, p: Producer, desc: Descriptor) -> None:
        kind = desc.kind
        if kind == Kind.SESSION_START:
            self._session_start(p, desc)
            return
        if faults.active:
            faults.hit("encode", desc.tag)
        data = self._arrays(p, desc)
        try:
            if kind == Kind.SCALAR:
                # The hot kind skips protobuf objects (encoders/scalar.py, event_bytes).
                number = desc.number if data is None else float(data.reshape(-1)[0])
                f = self.runs.file(p, desc.run)
                first = desc.tag not in f.tags_with_metadata
                if first:
                    f.tags_with_metadata.add(desc.tag)  # TensorBoard keeps only a tag's first metadata
                self.runs.step(p, f, desc.tag, desc.step, desc.seq, desc.kind)
                f.last_tag = desc.tag
                record = scalar_event_bytes(desc.wall_time, desc.step, desc.tag, number, first)
                p.bytes_written += len(record) + RECORD_OVERHEAD
                f.append(record)
                p.written["scalar"] += 1
                return
            if kind == Kind.GRAPH:
                from .encoders import graph

                graph_def = graph.encode_graph(desc)
                self._append_event(
                    p, desc.run, event_pb2.Event(wall_time=desc.wall_time, step=desc.step, graph_def=graph_def)
                )
                p.written["graph"] += 1
                return
            if kind == Kind.EMBEDDING:
                from .output import projector

                projector.write_embedding(self.output, p.run_path(desc.run), desc, data)
                p.written["embedding"] += 1
                return
            values = encoder_for(kind)(desc, data)
        except ValueError as exc:
            # Invariant 5: a value only the sidecar could check (an NDArray's contents)
            # is refused whole, counted, and reported; nothing is half-written.
            p.rejected[desc.tag] += 1
            p.send(Notice(desc.seq, desc.kind, desc.tag, str(exc)).pack())
            return
        finally:
            del data  # drop the views into the span before the trainer reuses it
        name = Kind(kind).name.lower()
        for run, value, metadata, counts in values:
            if counts and counts.get("nonfinite"):
                n = counts["nonfinite"]
                if desc.tag not in p.nonfinite:  # the trainer warns once per tag
                    reason = f"{n} NaN/Inf values left out of the buckets (counted in stats())"
                    p.send(Notice(desc.seq, desc.kind, desc.tag, reason, written=True).pack())
                p.nonfinite[desc.tag] += n
            f = self.runs.file(p, run)
            if metadata is not None and value.tag not in f.tags_with_metadata:
                f.tags_with_metadata.add(value.tag)  # TensorBoard keeps only a tag's first metadata
                value.metadata.CopyFrom(metadata)
            self.runs.step(p, f, value.tag, desc.step, desc.seq, desc.kind)
            ev = event_pb2.Event(wall_time=desc.wall_time, step=desc.step)
            ev.summary.value.append(value)
            f.last_tag = desc.tag
            record = ev.SerializeToString()
            p.bytes_written += len(record) + RECORD_OVERHEAD
            f.append(record)
            p.written[name] += 1

    def _append_event(self, p: Producer, run: str, ev: event_pb2.Event) -> None:
        record = ev.SerializeToString()
        p.bytes_written += len(record) + RECORD_OVERHEAD
        self.runs.file(p, run).append(record)

    def _session_start(self, p: Producer, desc: Descriptor) -> None:
        """``purge_step``: TensorBoard (file_version 2) purges on a *non-first*
        SessionLog START, dropping every event with step >= its step.  The first START
        a run ever shows only marks the session, so a run written by a writer that
        never logged one would not purge; writing START twice makes the second one
        always count, and on a run that already had a START both purge the same."""
        for _ in range(2):
            ev = event_pb2.Event(wall_time=desc.wall_time, step=desc.step)
            ev.session_log.status = event_pb2.SessionLog.START
            self._append_event(p, desc.run, ev)
        # The purged steps are logged again from purge_step on: not a step going backwards.
        self.runs.forget_steps(self.runs.file(p, desc.run))

    def stats(self, p: Producer) -> dict[str, Any]:
        """``p``'s own counters, and the process's (shared by every producer it serves)."""
        import psutil

        proc = psutil.Process()
        cpu = proc.cpu_times()
        mine = p.stats()
        return {
            **mine,
            "bytes_written": p.bytes_written,  # its own records, in files it may share
            "uploads": self.output.stats(),
            "cpu_seconds": cpu.user + cpu.system,
            "rss_bytes": proc.memory_info().rss,
            "scheduling": self.scheduling,
            "protobuf": PROTOBUF,
            "flush_secs": self.flush_secs,
            "producers": len(self.producers),
            "producers_served": self.served,
            "producers_ended_without_close": self.ended_without_close,
            "shared": self.listener is not None,
        }
