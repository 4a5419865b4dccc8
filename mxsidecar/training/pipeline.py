"""The training side of the transport: sequence numbers, admission, spans in flight.

::

    add_*  (training thread, under the pipeline lock)
      | sticky error?  -> raise it (one explained error, every call after it too)
      | admit: FlowControl.admit(reserve)      reserve = queue slot (+ arena span)
      |          full -> block (Condition.wait) or drop (counted)
      | seq += 1; copy into the span (numpy memcpy, or an engine copy for NDArrays)
      | completion.put(item)                   SimpleQueue.put: never blocks
      v
    completion thread -> waits for pending engine copies, in seq order -> channel
    receiver thread   <- Progress(done_seq): free spans <= done_seq, notify waiters
                      <- EOF: SidecarError (sticky), notify waiters

"Queued" is ``seq - done_seq``: everything logged and not yet handled by the
sidecar, including what sits in the completion queue and in the socket, so
``max_queue`` bounds memory end to end; ``slab_mb`` bounds the arrays.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import warnings
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import MxSidecarError, SidecarError, WriterClosed
from ..wire.arena import Arena, SpanAllocator
from ..wire.descriptors import Kind, Notice, Op
from ..wire.framing import ChannelClosed
from .backpressure import FlowControl, OnFull
from .capture import STOP, CompletionThread, EngineCapture
from .supervisor import SidecarOptions, Supervisor

__all__ = ["Part", "Pipeline"]

STATS_TIMEOUT = 10.0
_KIND_NAMES = {k: k.name.lower() for k in Kind}  # Enum.name is a property: not on the drop path


class Part(NamedTuple):
    """One array of an item: its layout in the span and how to put it there."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    fill: Callable[[Any, int], Callable[[], Any] | None]


_live: set[Pipeline] = set()  # open pipelines, closed at interpreter exit
_file_index = iter(range(sys.maxsize))  # distinguishes files of writers in one process


class Pipeline:
    def __init__(
        self,
        logdir: str,
        *,
        max_queue: int,
        slab_bytes: int,
        on_full: OnFull,
        block_timeout: float | None,
        flush_secs: float,
        filename_suffix: str,
        nice: int,
        cpus: tuple[int, ...],
        sched_idle: bool = True,
        on_error: str = "raise",
        max_restarts: int = 3,
    ) -> None:
        self.logdir = logdir
        self.on_error = on_error
        self.max_restarts = max_restarts
        self.restarts = 0
        self.lost = 0  # items that died with a sidecar (on_error='restart')
        self.last_error: str | None = None
        self._last_sent = 0  # highest item seq handed to the current channel
        self.max_queue = max_queue
        self._cond = threading.Condition(threading.Lock())
        self.flow = FlowControl(on_full, block_timeout)
        self._seq = 0
        self._done = 0
        self._spans: deque[tuple[int, int]] = deque()  # (seq, offset), seq ascending
        self._controls: deque[int] = deque()  # seqs of control descriptors not yet done
        self._stats_replies: dict[int, dict[str, Any]] = {}
        self.notices: Counter[tuple[str, str]] = Counter()  # (tag, reason) -> items refused
        self._error: MxSidecarError | None = None
        self._error_raised = False
        self._exited = False
        self.closed = False
        self.queued_bytes_total = 0
        self._engine: EngineCapture | None = None
        self.arena = Arena.create(slab_bytes)
        try:
            self.completion = CompletionThread(self._send, self._on_completion_failure)
            self._sidecar_args = (logdir, self.arena.name, flush_secs, filename_suffix)
            self._sidecar_tuning = (nice, cpus, sched_idle)
            self.supervisor = self._start_sidecar()
        except BaseException:
            self.arena.close()
            self.arena.unlink()
            raise
        self.completion.start()
        self._owner_pid = os.getpid()
        _live.add(self)

    def _start_sidecar(self) -> Supervisor:
        logdir, arena, flush_secs, suffix = self._sidecar_args
        nice, cpus, sched_idle = self._sidecar_tuning
        options = SidecarOptions(logdir, arena, flush_secs, suffix, next(_file_index), nice, cpus, sched_idle)
        return Supervisor(options, self._on_progress, self._on_notice, self._on_stats, self._on_exit)

    # -- the training thread's side -----------------------------------------
    def _check(self) -> None:
        """Raise the sticky error (called with the lock held)."""
        if self._error is not None:
            self._error_raised = True
            raise self._error
        if self.closed:
            raise WriterClosed("this SidecarWriter is closed")

    def _reserve_slot(self) -> bool | str:
        return True if self._seq - self._done < self.max_queue else "max_queue"

    def submit(
        self,
        kind: Kind,
        tag: str,
        step: int,
        wall_time: float,
        *,
        run: str = "",
        number: float = 0.0,
        text: str = "",
        options: dict[str, Any] | None = None,
    ) -> bool:
        """Enqueue a value that travels inside its descriptor; False if dropped."""
        with self._cond:
            if self._error is not None or self.closed:
                self._check()
            if self._seq - self._done >= self.max_queue:
                if self.flow.admit(self._reserve_slot, self._cond.wait, _KIND_NAMES[kind], tag, self._check) is None:
                    return False
            self._seq += 1
            self.completion.put(
                (Op.ITEM, self._seq, kind, tag, step, wall_time, run, number, text, 0, 0, "", (), options, None)
            )
            return True

    def submit_array(
        self,
        kind: Kind,
        tag: str,
        step: int,
        wall_time: float,
        parts: list[Part],
        *,
        run: str = "",
        text: str = "",
        options: dict[str, Any] | None = None,
        named: bool = False,
    ) -> bool:
        """Reserve one span for every part, fill them, enqueue one descriptor; False if dropped.

        Each ``part.fill(arena_buf, offset)`` copies (numpy) or starts an engine copy
        (NDArray) and returns None or the callable the completion thread waits on.
        One part travels as the descriptor's own dtype/shape; several (an embedding's
        matrix and sprite images, a pr-curve's labels and predictions) are laid out
        back to back, 64-byte aligned, and described in ``options["parts"]`` (also for
        one part with ``named``: the sidecar then gets a dict of named arrays).
        """
        layout: list[tuple[Part, int]] = []
        nbytes = 0
        for part in parts:
            layout.append((part, nbytes))
            nbytes += SpanAllocator.aligned(part.nbytes)
        with self._cond:
            if self._error is not None or self.closed:
                self._check()
            allocator = self.arena.allocator
            assert allocator is not None
            if not allocator.fits_ever(nbytes):
                raise ValueError(
                    f"{_KIND_NAMES[kind]} {tag!r}: {nbytes / 2**20:.1f} MB can never fit in the arena "
                    f"(slab_mb={self.arena.size / 2**20:g}); raise slab_mb or log a smaller array"
                )

            def reserve() -> int | str:
                if self._seq - self._done >= self.max_queue:
                    return "max_queue"
                offset = allocator.allocate(nbytes)
                return "slab_mb" if offset is None else offset

            offset = self.flow.admit(reserve, self._cond.wait, _KIND_NAMES[kind], tag, self._check)
            if offset is None:
                return False
            waits: list[Callable[[], Any]] = []
            try:
                for part, rel in layout:
                    w = part.fill(self.arena.buf, offset + rel)
                    if w is not None:
                        waits.append(w)
            except BaseException:
                if not waits:
                    allocator.free(offset)
                else:
                    # Engine copies already pushed may still write into the span, so it
                    # cannot be reused yet: a silent SKIP (empty text) travels in order,
                    # the completion thread waits for those copies, and the sidecar's
                    # progress frees the span as for any item.
                    self._seq += 1
                    self._spans.append((self._seq, offset))
                    self._controls.append(self._seq)
                    self.completion.put(
                        (Op.SKIP, self._seq, kind, tag, 0, 0.0, "", 0.0, "", 0, 0, "", (), None, _wait_all(waits))
                    )
                raise
            pending = None if not waits else waits[0] if len(waits) == 1 else _wait_all(waits)
            self._seq += 1
            self._spans.append((self._seq, offset))
            self.queued_bytes_total += nbytes
            if len(parts) == 1 and not named:
                (part,) = parts
                dtype, shape, nbytes = part.dtype, part.shape, part.nbytes
            else:
                dtype, shape = "", ()
                options = dict(options or {})
                options["parts"] = [[part.name, rel, part.dtype, list(part.shape)] for part, rel in layout]
            self.completion.put(
                (
                    Op.ITEM,
                    self._seq,
                    kind,
                    tag,
                    step,
                    wall_time,
                    run,
                    0.0,
                    text,
                    offset,
                    nbytes,
                    dtype,
                    shape,
                    options,
                    pending,
                )
            )
            return True

    @property
    def engine(self) -> EngineCapture:
        """The NDArray capture, created on the first NDArray (importing mxnet then)."""
        if self._engine is None:
            self._engine = EngineCapture()
        return self._engine

    def _control(self, op: Op) -> int:
        """Enqueue a control descriptor (never subject to max_queue); its seq."""
        self._seq += 1
        self._controls.append(self._seq)
        self.completion.put((op, self._seq, 0, "", 0, 0.0, "", 0.0, "", 0, 0, "", (), None, None))
        return self._seq

    def _items_pending(self) -> int:
        """Items (not control messages) logged and not yet handled by the sidecar."""
        return self._seq - self._done - len(self._controls)

    def flush(self, timeout: float | None) -> None:
        with self._cond:
            self._check()
            seq = self._control(Op.FLUSH)
            if not self._cond.wait_for(lambda: self._done >= seq or self._error is not None, timeout):
                raise TimeoutError(
                    f"flush() did not complete within {timeout}s: {self._seq - self._done} items still queued"
                )
            if self._error is not None:
                self._check()

    def stats(self) -> dict[str, Any]:
        with self._cond:
            sidecar: dict[str, Any] | None = None
            if self._error is None and not self.closed:
                seq = self._control(Op.STATS)
                # A STATS lost with a restarted sidecar is marked done: stop waiting then.
                self._cond.wait_for(
                    lambda: seq in self._stats_replies or self._error is not None or self._done >= seq, STATS_TIMEOUT
                )
                sidecar = self._stats_replies.pop(seq, None)
            allocator = self.arena.allocator
            assert allocator is not None
            dropped: dict[str, int] = Counter()
            for (kind, _tag), n in self.flow.dropped.items():
                dropped[kind] += n
            sent = max(self._last_sent, self._done)
            in_flight = (sent - self._done) - len([c for c in self._controls if c <= sent])
            return {
                "queued": self._items_pending(),
                "in_flight": in_flight,
                "logged_seq": self._seq,
                "done_seq": self._done,
                "dropped": dict(dropped),
                "dropped_by_tag": {f"{k}/{t}": n for (k, t), n in self.flow.dropped.items()},
                "rejected": sum(self.notices.values()),
                "blocked_seconds": self.flow.blocked_seconds,
                "arena_bytes": self.arena.size,
                "arena_used_bytes": allocator.used_bytes,
                "array_bytes_queued_total": self.queued_bytes_total,
                "sidecar_pid": self.supervisor.pid,
                "sidecar": sidecar,
                "restarts": self.restarts,
                "lost": self.lost,
                "last_error": str(self._error) if self._error is not None else self.last_error,
            }

    def close(self, timeout: float | None) -> None:
        """Drain, let the sidecar fsync and exit, release everything; idempotent.

        Raises the sidecar's error if one happened and was never raised before.
        """
        with self._cond:
            if self.closed:
                return
            self.closed = True
            _live.discard(self)
            if os.getpid() != self._owner_pid:
                return  # a forked child: the sidecar, threads and segment are the parent's
            if self._error is None and not self._exited:
                self.supervisor.request_close()
                self._control(Op.CLOSE)
                self.completion.put(STOP)
            else:
                self.completion.put(STOP)
                self.supervisor.shutdown_send()  # EOF: the sidecar keeps what it has, exits
        if not self.supervisor.wait(timeout):
            self.supervisor.kill()
            self.supervisor.wait(None)
            with self._cond:
                self._error = SidecarError(
                    f"the sidecar did not finish writing within {timeout}s of close() and was killed; "
                    f"{self._items_pending()} logged items were not written"
                )
        self.completion.join(timeout=5.0)
        self.supervisor.close_channel()
        if self._engine is not None:
            # Wrappers pin the mapping (arena.close tolerates that); dropping them
            # lets it go.  A copy still in flight keeps its wrapper, hence the mapping,
            # alive until it is done: never a write into unmapped memory.
            self._engine.clear()
        self.arena.close()
        self.arena.unlink()
        self._report_losses()
        if self._error is not None and not self._error_raised:
            self._error_raised = True
            raise self._error

    def _report_losses(self) -> None:
        dropped = self.flow.dropped_total
        rejected = sum(self.notices.values())
        lost = self._items_pending() if self._error is not None else 0
        lost += self.lost
        if dropped or rejected or lost:
            _warn(
                f"mxsidecar: {self.logdir}: {dropped} items dropped (on_full='drop'), "
                f"{rejected} rejected by the sidecar, {lost} lost with the sidecar "
                f"({self.restarts} restarts); see stats()",
                RuntimeWarning,
                stacklevel=3,
            )

    # -- receiver / completion thread callbacks ------------------------------
    def _send(self, payloads: list[bytes], item_seqs: list[int], last_seq: int) -> None:
        """The completion thread's hand-off.  If the channel is gone, wait for the
        receiver's verdict: a restarted sidecar (this batch is lost: counted, and marked
        done so that no flush() waits for it; the next batch goes to the new channel)
        or the end (ChannelClosed ends the thread)."""
        sup = self.supervisor
        try:
            sup.send(payloads)
        except ChannelClosed:
            with self._cond:
                self._cond.wait_for(lambda: self.supervisor is not sup or self._error is not None or self.closed)
                if self.supervisor is sup:
                    raise
                self._count_lost(len([q for q in item_seqs if q > self._done]))
                self._advance(last_seq)
                self._cond.notify_all()
            return
        self._last_sent = last_seq

    def _count_lost(self, n: int) -> None:
        if n:
            self.lost += n
            _warn(
                f"mxsidecar: {self.logdir}: {n} logged items were lost with a failed sidecar "
                f"(counted in stats()['lost']); the sidecar was restarted ({self.restarts} of {self.max_restarts})",
                RuntimeWarning,
                stacklevel=2,
            )

    def _on_completion_failure(self, exc: BaseException) -> None:
        with self._cond:
            if self._error is None:
                err = MxSidecarError(f"mxsidecar's completion thread failed; logging stopped: {exc!r}")
                err.__cause__ = exc
                self._error = err
            self._cond.notify_all()
        # Nothing more will be sent: EOF lets the sidecar write what it has and exit.
        self.supervisor.shutdown_send()

    def _on_progress(self, done_seq: int) -> None:
        with self._cond:
            self._advance(done_seq)
            self._cond.notify_all()

    def _advance(self, done_seq: int) -> None:
        """Everything up to ``done_seq`` is handled: free its spans (lock held)."""
        self._done = max(self._done, done_seq)
        spans = self._spans
        allocator = self.arena.allocator
        assert allocator is not None
        while spans and spans[0][0] <= done_seq:
            allocator.free(spans.popleft()[1])
        while self._controls and self._controls[0] <= done_seq:
            self._controls.popleft()

    def _on_notice(self, notice: Notice) -> None:
        kind = Kind(notice.kind).name.lower()
        if notice.written:  # sent once per tag by the sidecar, which keeps the count
            _warn(f"mxsidecar: {kind} {notice.tag!r}: {notice.reason}", RuntimeWarning, stacklevel=2)
            return
        with self._cond:
            key = (notice.tag, notice.reason)
            first = key not in self.notices
            self.notices[key] += 1
        if first:
            _warn(
                f"mxsidecar: {kind} {notice.tag!r} was not written: {notice.reason} "
                "(counted in stats()['rejected']; warned once per tag and reason)",
                RuntimeWarning,
                stacklevel=2,
            )

    def _on_stats(self, seq: int, stats: dict[str, Any]) -> None:
        with self._cond:
            self._stats_replies[seq] = stats
            self._cond.notify_all()

    def _on_exit(self, error: SidecarError | None) -> None:
        with self._cond:
            self._exited = True
            if error is not None:
                self.last_error = str(error)
                restartable = self.on_error == "restart" and not self.closed and self._error is None
                if restartable and self.restarts < self.max_restarts:
                    self._restart(error)
                elif self._error is None:
                    lost = self._items_pending()
                    more = f" after {self.restarts} restarts (max_restarts)" if self.restarts else ""
                    error.args = (f"{error.args[0]}{more}; {lost} logged items were not written",)
                    self._error = error
            self._cond.notify_all()

    def _restart(self, error: SidecarError) -> None:
        """on_error='restart' (called with the lock held): a new sidecar, a new event file.

        What the dead sidecar had been sent but had not reported done is lost and
        counted; its spans are free again (their copies were complete before they were
        sent).  Everything not yet sent goes to the new sidecar, in order.
        """
        self.restarts += 1
        sent = max(self._last_sent, self._done)
        lost = (sent - self._done) - len([c for c in self._controls if self._done < c <= sent])
        self._advance(sent)
        self.supervisor.close_channel()
        self.supervisor = self._start_sidecar()
        self._exited = False
        _warn(f"mxsidecar: {self.logdir}: {error}; restarting it on a new event file", RuntimeWarning, stacklevel=2)
        self._count_lost(lost)


def _warn(message: str, category: type[Warning] = RuntimeWarning, stacklevel: int = 2) -> None:
    """warnings.warn that cannot kill the receiver or completion thread: under
    ``-W error`` a warning is an exception, and raised there it would look like a
    dead sidecar.  Then it goes to stderr instead."""
    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    except Warning:
        print(f"{category.__name__}: {message}", file=sys.stderr)


def _wait_all(waits: list[Callable[[], Any]]) -> Callable[[], None]:
    def wait() -> None:
        for w in waits:
            w()

    return wait


def _close_all_at_exit() -> None:
    """Writers left open are closed at interpreter exit (after user threads are joined)."""
    for p in list(_live):
        try:
            p.close(timeout=60.0)
        except Exception as exc:  # nobody left to raise to
            print(f"mxsidecar: closing {p.logdir} at exit: {exc}", file=sys.stderr)


def _after_fork_in_child() -> None:
    for p in list(_live):
        p._cond = threading.Condition(threading.Lock())  # another thread may have held it at fork
        p._error = MxSidecarError(
            "a SidecarWriter cannot be used in a process forked from the one that created it "
            "(its sidecar and threads belong to the parent); create a new writer in the child"
        )
    _live.clear()


atexit.register(_close_all_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
