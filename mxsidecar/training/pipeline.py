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
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import MxSidecarError, SidecarError, WriterClosed
from ..wire.arena import Arena, SpanAllocator
from ..wire.descriptors import Kind, Op
from .backpressure import FlowControl, OnFull
from .capture import EngineCapture, NDArrayInfo
from .completion import SCALARS_PER_FRAME, STOP, CompletionThread
from .feedback import SidecarFeedback
from .remote import RemoteLogdir
from .supervisor import Supervisor

__all__ = ["Part", "Pipeline"]

STATS_TIMEOUT = 10.0
_KIND_NAMES = {k: k.name.lower() for k in Kind}  # Enum.name is a property: not on the drop path
_ITEM = Op.ITEM  # a module global: Op.ITEM is a lookup on the enum class per call


class Part(NamedTuple):
    """One array of an item: its layout in the span and how to put it there."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    fill: Callable[[Any, int], Callable[[], Any] | None]


_live: set[Pipeline] = set()  # open pipelines, closed at interpreter exit


class Pipeline(SidecarFeedback):
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
        remote: RemoteLogdir | None = None,
        prefix: str = "",
        share: bool = False,
    ) -> None:
        # With ``share``, ``logdir`` is the node sidecar's directory and our runs are
        # under ``prefix`` in it (``rank_<k>``); messages name our own directory.
        self.logdir = (os.path.join(logdir, prefix) if prefix else logdir) if remote is None else remote.url
        self.on_error = on_error
        self.max_restarts = max_restarts
        self.restarts = 0
        self.lost = 0  # items that died with a sidecar (on_error='restart')
        self.last_error: str | None = None
        self._last_sent = 0  # highest seq handed (or being handed) to the current channel
        self._retired: list[Supervisor] = []
        self.max_queue = max_queue
        self._cond = threading.Condition(threading.Lock())
        self.flow = FlowControl(on_full, block_timeout)
        self._seq = 0
        self._done = 0
        self._spans: deque[tuple[int, int]] = deque()  # (seq, offset), seq ascending
        self._controls: deque[int] = deque()  # seqs of control descriptors not yet done
        self._controls_done = 0  # control descriptors done (or lost), for counting items
        self._stats_replies: dict[int, dict[str, Any]] = {}
        self.notices: Counter[tuple[str, str]] = Counter()  # (tag, reason) -> items refused
        self.files: list[str] = []  # every event file its sidecars created, restarts included
        self._error: MxSidecarError | None = None
        self._error_raised = False
        self._exited = False
        self.closed = False
        self.queued_bytes_total = 0
        self._engine: EngineCapture | None = None
        self.arena = Arena.create(slab_bytes)
        try:
            frame_values = max(1, min(SCALARS_PER_FRAME, max_queue // 2))
            self.completion = CompletionThread(self._send, self._on_completion_failure, frame_values)
            self._sidecar_args = (logdir, self.arena.name, flush_secs, filename_suffix)
            self._sidecar_tuning = (nice, cpus, sched_idle)
            self._sidecar_remote = remote
            self._sidecar_placement = (prefix, share)
            self.supervisor = self._start_sidecar()
        except BaseException:
            self.arena.close()
            self.arena.unlink()
            raise
        self.completion.start()
        self._owner_pid = os.getpid()
        _live.add(self)

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
        run: str = "",
        number: float = 0.0,
        text: str = "",
        options: dict[str, Any] | None = None,
    ) -> bool:
        """Enqueue a value that travels inside its descriptor; False if dropped.

        ``run`` and ``number`` may be passed by position (``add_scalar`` does: a
        keyword argument costs a little more per call).

        The lock is taken by its own ``acquire``/``release`` (C methods), not ``with``
        on the Condition, whose ``__enter__``/``__exit__`` are two Python calls more:
        this is the whole path of ``add_scalar(float)``, a microsecond or two.
        """
        cond = self._cond
        cond.acquire()
        try:
            if self._error is not None or self.closed:
                self._check()
            if self._seq - self._done >= self.max_queue:
                if self.flow.admit(self._reserve_slot, cond.wait, _KIND_NAMES[kind], tag, self._check) is None:
                    return False
            seq = self._seq = self._seq + 1
            self.completion.put(
                (_ITEM, seq, kind, tag, step, wall_time, run, number, text, 0, 0, "", (), options, None)
            )
            return True
        finally:
            cond.release()

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

        The common case, room in the queue and in the arena, takes one ``allocate``;
        the policy (``fits_ever``, ``FlowControl.admit``) runs only when it fails.
        """
        single = len(parts) == 1 and not named
        if single:
            nbytes = SpanAllocator.aligned(parts[0].nbytes)
            layout = [(parts[0], 0)]
        else:
            layout = []
            nbytes = 0
            for part in parts:
                layout.append((part, nbytes))
                nbytes += SpanAllocator.aligned(part.nbytes)
        cond = self._cond
        cond.acquire()
        try:
            offset = self._take_span(kind, tag, nbytes)
            if offset is None:
                return False
            waits: list[Callable[[], Any]] = []
            buf = self.arena.buf
            try:
                for part, rel in layout:
                    w = part.fill(buf, offset + rel)
                    if w is not None:
                        waits.append(w)
            except BaseException:
                if not waits:
                    self._free_span(offset)
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
            seq = self._seq = self._seq + 1
            self._spans.append((seq, offset))
            self.queued_bytes_total += nbytes
            if single:
                part = parts[0]
                dtype, shape, nbytes = part.dtype, part.shape, part.nbytes
            else:
                dtype, shape = "", ()
                options = dict(options or {})
                options["parts"] = [[part.name, rel, part.dtype, list(part.shape)] for part, rel in layout]
            self.completion.put(
                (_ITEM, seq, kind, tag, step, wall_time, run, 0.0, text, offset, nbytes, dtype, shape, options, pending)
            )
            return True
        finally:
            cond.release()

    def submit_ndarray(
        self,
        kind: Kind,
        tag: str,
        step: int,
        wall_time: float,
        value: Any,
        info: NDArrayInfo,
        options: dict[str, Any] | None = None,
    ) -> bool:
        """:meth:`submit_array` for one NDArray (``info``: ``engine.describe(value)``).

        The per-step kinds (a loss, a gradient's histogram) come here: one span, one
        engine push, no Part and no layout, so the call is as short as the training
        thread can make it while MXNet's workers hold the cores.
        """
        nbytes = info[2]
        cond = self._cond
        cond.acquire()
        try:
            offset = self._take_span(kind, tag, nbytes)
            if offset is None:
                return False
            try:
                pending = (self._engine or self.engine).start(value, info, self.arena.buf, offset)
            except BaseException:
                self._free_span(offset)  # nothing was pushed that could write into it
                raise
            seq = self._seq = self._seq + 1
            self._spans.append((seq, offset))
            self.queued_bytes_total += SpanAllocator.aligned(nbytes)
            shape, dtype = info[0], info[1]
            self.completion.put(
                (_ITEM, seq, kind, tag, step, wall_time, "", 0.0, "", offset, nbytes, dtype, shape, options, pending)
            )
            return True
        finally:
            cond.release()

    def _free_span(self, offset: int) -> None:
        """Give back a span no descriptor was sent for (lock held)."""
        allocator = self.arena.allocator
        assert allocator is not None
        allocator.free(offset)

    def _take_span(self, kind: Kind, tag: str, nbytes: int) -> int | None:
        """The offset of a span of ``nbytes`` for one item (lock held), or None if the
        item is dropped; raises the sticky error first.  With room in the queue and the
        arena this is one ``allocate``; otherwise the ``on_full`` policy decides."""
        if self._error is not None or self.closed:
            self._check()
        allocator = self.arena.allocator
        assert allocator is not None
        if self._seq - self._done < self.max_queue:
            offset = allocator.allocate(nbytes)
            if offset is not None:
                return offset
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

        return self.flow.admit(reserve, self._cond.wait, _KIND_NAMES[kind], tag, self._check)

    @property
    def engine(self) -> EngineCapture:
        """The NDArray capture, created on the first NDArray (importing mxnet then)."""
        if self._engine is None:
            self._engine = EngineCapture()
            _close_before_mxnet_shuts_down()
        return self._engine

    def purge(self, step: int, wall_time: float) -> None:
        """``purge_step``'s SessionLog START: an ITEM to the sidecar, but no value the
        user logged, so it is counted with the control messages (never in the items
        queued, lost or written) and, like them, is never subject to max_queue."""
        with self._cond:
            self._check()
            self._seq += 1
            self._controls.append(self._seq)
            self.completion.put(
                (Op.ITEM, self._seq, Kind.SESSION_START, "", step, wall_time, "", 0.0, "", 0, 0, "", (), None, None)
            )

    def _control(self, op: Op) -> int:
        """Enqueue a control descriptor (never subject to max_queue); its seq."""
        self._seq += 1
        self._controls.append(self._seq)
        self.completion.put((op, self._seq, 0, "", 0, 0.0, "", 0.0, "", 0, 0, "", (), None, None))
        return self._seq

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
            killed = self.supervisor.kill()
            self.supervisor.wait(None)
            ended = "was killed" if killed else "was left to the other writers it serves"
            with self._cond:
                if self.completion.waiting_for_engine:
                    why = (
                        f"close() gave up after {timeout}s: MXNet's engine had not computed an NDArray "
                        f"logged before it, so the sidecar never got it and {ended}"
                    )
                else:
                    why = f"the sidecar did not finish writing within {timeout}s of close() and {ended}"
                self._error = SidecarError(f"{why}; {self._items_pending()} logged items were not written")
        self.completion.join(timeout=5.0)
        for sup in (*self._retired, self.supervisor):
            sup.close_channel()
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


def _close_before_mxnet_shuts_down() -> None:
    """Run our exit hook before MXNet's, whichever was imported first.

    atexit runs the last registered hook first, and mxnet registers its engine
    shutdown (``MXNotifyShutdown``) when it is imported.  A script that imports
    mxsidecar before mxnet would have that shutdown run before our close: the engine
    stops running pending operations, so an engine copy still waiting for its value
    never completes, and close() waited its whole timeout (60 s) at exit and lost
    those items.  An NDArray exists, so mxnet is imported now: registering again puts
    our hook after MXNet's in the list, hence first to run.
    """
    atexit.unregister(_close_all_at_exit)
    atexit.register(_close_all_at_exit)


def _after_fork_in_child() -> None:
    """The parent's pipelines in a forked child: unusable, and not holding the parent's
    connection open (the sidecar learns of the parent's death by EOF on it).  A writer
    that shares its node's sidecar gets a pipeline of the child's own (workers.py)."""
    for p in list(_live):
        p._cond = threading.Condition(threading.Lock())  # another thread may have held it at fork
        p._error = MxSidecarError(
            "a SidecarWriter with a sidecar of its own (share_sidecar=False, or a URL logdir) cannot be used "
            "in a process forked from the one that created it (its sidecar and threads belong to the parent); "
            "create a new writer in the child"
        )
        for sup in (*p._retired, p.supervisor):
            sup.forget_in_child()
    _live.clear()


atexit.register(_close_all_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
