"""What comes back from the sidecar, handled on the training side's helper threads.

The receiver thread (``supervisor``) delivers progress, notices, stats replies and,
once, the sidecar's exit; the completion thread (``capture``) hands batches to the
channel and reports its own failure.  Each handler takes the pipeline's lock, updates
the counters the training thread reads, and wakes whoever waits on them: a caller
blocked by ``on_full='block'``, ``flush()``, ``stats()`` or ``close()``.  A dead
sidecar becomes the one sticky error of invariant 8, or, under ``on_error='restart'``,
a new sidecar and a count of what was lost.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections import Counter, deque
from typing import Any

from ..errors import MxSidecarError, SidecarError
from ..wire.arena import Arena
from ..wire.descriptors import Kind, Notice
from ..wire.framing import ChannelClosed
from .backpressure import FlowControl
from .launch import SidecarOptions
from .remote import RemoteLogdir
from .supervisor import Supervisor

__all__ = ["SidecarFeedback"]

_file_index = iter(range(sys.maxsize))  # distinguishes files of writers in one process


class SidecarFeedback:
    """The callbacks half of :class:`~.pipeline.Pipeline` (its state is declared here)."""

    logdir: str
    on_error: str
    max_restarts: int
    restarts: int
    lost: int
    last_error: str | None
    closed: bool
    arena: Arena
    supervisor: Supervisor
    _retired: list[Supervisor]  # the supervisors of restarted sidecars, their channels shut down
    notices: Counter[tuple[str, str]]
    files: list[str]
    flow: FlowControl
    _cond: threading.Condition
    _last_sent: int
    _done: int
    _spans: deque[tuple[int, int]]
    _controls: deque[int]
    _controls_done: int
    _stats_replies: dict[int, dict[str, Any]]
    _error: MxSidecarError | None
    _exited: bool
    _seq: int
    _sidecar_args: tuple[str, str, float, str]
    _sidecar_tuning: tuple[int, tuple[int, ...], bool]
    _sidecar_remote: RemoteLogdir | None
    _sidecar_placement: tuple[str, bool]  # (our runs' prefix in the sidecar's logdir, share it)

    def _start_sidecar(self) -> Supervisor:
        """Join the node's sidecar for our logdir, or start one (see Supervisor)."""
        logdir, arena, flush_secs, suffix = self._sidecar_args
        nice, cpus, sched_idle = self._sidecar_tuning
        prefix, share = self._sidecar_placement
        options = SidecarOptions(
            logdir, arena, flush_secs, suffix, next(_file_index), nice, cpus, sched_idle, self._sidecar_remote,
            prefix, share,
        )  # fmt: skip
        return Supervisor(options, self._on_progress, self._on_notice, self._on_stats, self._on_exit, self._on_opened)

    def _items_pending(self) -> int:
        """Items (not control messages) logged and not yet handled by the sidecar."""
        return self._seq - self._done - len(self._controls)

    def _items_handled(self) -> int:
        """Items (not control messages) a sidecar wrote or refused: every seq up to
        ``_done`` but the control messages and what was lost with a restarted sidecar
        (``_restart`` marks that done too)."""
        return self._done - self._controls_done - self.lost

    def item_counts(self) -> dict[str, int]:
        """What became of every value logged (control messages are not values), each in
        one count: ``written``, ``dropped`` (on_full='drop'), ``rejected`` (by the
        sidecar), ``lost`` (with a failed sidecar, restarted or not); after close() they
        add up to everything logged."""
        with self._cond:
            rejected = sum(self.notices.values())
            lost = self.lost + (self._items_pending() if self._error is not None else 0)
            return {
                "written": self._items_handled() - rejected,
                "dropped": self.flow.dropped_total,
                "rejected": rejected,
                "lost": lost,
            }

    def _report_losses(self) -> None:
        counts = self.item_counts()
        dropped, rejected, lost = counts["dropped"], counts["rejected"], counts["lost"]
        if dropped or rejected or lost:
            _warn(
                f"mxsidecar: {self.logdir}: {dropped} items dropped (on_full='drop'), "
                f"{rejected} rejected by the sidecar, {lost} lost with the sidecar "
                f"({self.restarts} restarts); see stats()",
                RuntimeWarning,
                stacklevel=3,
            )

    def _send(self, payloads: list[bytes], last_seq: int) -> None:
        """The completion thread's hand-off of one batch (``last_seq``: its last seq).

        The batch counts as sent, and its channel is chosen, in one critical section
        *before* its bytes go.  A restart takes the same lock, so it comes either
        before (the batch goes to the new sidecar) or after (``_restart`` sees the batch
        in ``_last_sent`` and counts it lost with the dead sidecar, then marks it done).
        Recording it after the send instead (issue 15) let a restart slip in between:
        a batch the dead sidecar received was then neither counted lost nor re-sent.
        A restart shuts the old channel down but does not close it under a send (see
        ``_restart``), so a send that lost the race fails with ChannelClosed; then wait
        for the receiver's verdict: a restarted sidecar (this batch is already counted)
        or the end (ChannelClosed ends the completion thread).
        """
        with self._cond:
            sup = self.supervisor
            self._last_sent = last_seq
        try:
            sup.send(payloads)
        except ChannelClosed:
            with self._cond:
                self._cond.wait_for(lambda: self.supervisor is not sup or self._error is not None or self.closed)
                if self.supervisor is sup:
                    raise

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
            self._controls_done += 1

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

    def _on_opened(self, path: str) -> None:
        with self._cond:
            self.files.append(path)  # each sidecar creates each of its files once (O_EXCL)

    def event_files(self) -> list[str]:
        """Every event file this pipeline's sidecars created, in order, restarts included."""
        with self._cond:
            return list(self.files)

    def _on_exit(self, error: SidecarError | None) -> None:
        with self._cond:
            self._exited = True
            if error is not None:
                self.last_error = str(error)
                restartable = self.on_error == "restart" and not self.closed and self._error is None
                if restartable and self.restarts < self.max_restarts:
                    try:
                        self._restart(error)
                    except Exception as exc:  # no new sidecar: the error is the writer's last
                        error.args = (f"{error.args[0]}; restarting it failed: {exc}",)
                        error.__context__ = exc
                        self._error = error
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
        # Shut down, not closed: the completion thread may be about to send on it.  A
        # closed socket fails that send with EBADF (a completion thread failure), or
        # worse, its descriptor number is reused by the new sidecar's channel; a shut
        # down one fails it with EPIPE, which _send expects.  Closed at close().
        self.supervisor.shutdown_send()
        self._retired.append(self.supervisor)
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
