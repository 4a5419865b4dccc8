"""The pipeline between the training thread and its sidecar: made, flushed, closed.

A :class:`Pipeline` is three halves of one object, one lock and one state:
``admission.py`` (what ``add_*`` runs in the training thread: sequence numbers, the
queue and the arena, the hand-off to the completion thread), ``feedback.py`` (what the
sidecar sends back, handled on the helper threads) and this module: construction,
the control messages (``flush``, ``stats``, ``purge_step``'s START), ``close``, and
what the interpreter's exit and a fork do to the pipelines left open.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections import Counter, deque
from typing import Any

from ..errors import MxSidecarError, SidecarError
from ..wire.arena import Arena
from ..wire.descriptors import Kind, Op
from .admission import Admission
from .backpressure import FlowControl, OnFull
from .capture import EngineCapture
from .completion import SCALARS_PER_FRAME, STOP, CompletionThread
from .remote import RemoteLogdir
from .supervisor import Supervisor

__all__ = ["Pipeline"]

STATS_TIMEOUT = 10.0

_live: set[Pipeline] = set()  # open pipelines, closed at interpreter exit


class Pipeline(Admission):
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
        self._mxnet_imported = _close_before_mxnet_shuts_down
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
