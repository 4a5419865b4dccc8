"""A writer in processes that did not create it: forked workers and pickled handles.

Gluon's ``DataLoader(num_workers>0)`` and ``multiprocessing`` pools fork the training
process; a dataset that logs then calls a writer whose sidecar, threads and shared
memory belong to the parent.  Such a writer, when it shares its node's sidecar
(``share_sidecar=True``, a local logdir), becomes a producer of its own in the child:

* at fork nothing happens but bookkeeping (most forked children never log, and the
  fork may be in the middle of anything): the writer's pipeline is replaced by a
  :class:`ForkedPipeline` placeholder;
* the first call that needs a pipeline builds one, which joins the node's sidecar
  with its own shared memory, queue and sequence numbers, and writes the same run;
* the child's values reach the sidecar however it ends: its writer sends each value
  before ``add_*`` returns (no completion thread in between), so a worker killed with
  SIGTERM, which is how ``Pool.terminate()`` and Gluon's DataLoader end their workers,
  has handed over everything it logged, and the sidecar writes all it received; a
  multiprocessing child that exits (``os._exit`` after its finalizers) also closes
  its writers in a finalizer.

  Why no SIGTERM handler that would flush first: a pool worker spends its idle time
  in ``SemLock.acquire`` on the task queue, and CPython checks for a pending signal
  only when that wait returns EINTR.  A SIGTERM that lands just before the wait
  starts leaves the handler pending and the worker asleep forever (measured: one
  DataLoader run in four hung in ``Pool.terminate()``'s join); the default action
  kills it whatever it is doing.

Under spawn or forkserver, or passed to a pool's task, a writer is pickled: it travels
as its constructor's arguments (:func:`reconnect`) and joins the node's sidecar at the
other end.  What is not shared is not inherited: ``purge_step`` (already applied) and
``stats_secs`` (the parent logs those).

Two producers writing the same tag in one run interleave their steps; TensorBoard
drops a tag's points when its steps go backwards, so each worker should log its own
tags (``f'data/worker{wid}/...'``); the sidecar warns once per run and tag when a
step goes backwards.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any

from ..errors import WriterClosed
from ..wire.descriptors import pack_descriptor
from ..wire.framing import ChannelClosed
from .completion import STOP, skip_descriptor

if TYPE_CHECKING:
    from .pipeline import Pipeline
    from .writer import SidecarWriter

__all__ = ["ForkedPipeline", "reconnect", "track"]

_tracked: weakref.WeakSet[SidecarWriter] = weakref.WeakSet()  # writers that can follow a fork
_finalizer_in: int = 0  # pid of the process whose multiprocessing finalizer closes writers
_join_lock = threading.Lock()
_reconnected: dict[tuple[int, str], SidecarWriter] = {}  # (pid, arguments) -> the writer unpickled there


def track(writer: SidecarWriter) -> None:
    """``writer`` shares its node's sidecar: a forked child may use it."""
    _tracked.add(writer)


class ForkedPipeline:
    """A forked child's stand-in for its writer's pipeline, until the first call.

    Any attribute the writer asks for (``submit``, ``engine``, ``flush``, ...) makes the
    real pipeline first; ``close`` on a writer that never logged here does nothing.
    """

    def __init__(self, writer: SidecarWriter) -> None:
        self._writer = writer
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        if self.closed:
            raise WriterClosed("this SidecarWriter is closed")
        with _join_lock:  # two threads of the child calling at once make one pipeline
            pipe: Any = self._writer._pipe
            if pipe is self:
                pipe = self._writer._join_after_fork()
        return getattr(pipe, name)

    def close(self, timeout: float | None) -> None:
        self.closed = True

    def event_files(self) -> list[str]:
        return []

    def item_counts(self) -> dict[str, int]:
        return {"written": 0, "dropped": 0, "rejected": 0, "lost": 0}


def joined_in_child(pipe: Pipeline) -> None:
    """A worker made a pipeline: make sure it is closed however the worker ends."""
    global _finalizer_in
    from . import pipeline

    if "multiprocessing" in sys.modules and _finalizer_in != os.getpid():
        from multiprocessing import util

        # A multiprocessing child ends with os._exit after running these, not atexit.
        util.Finalize(None, pipeline._close_all_at_exit, exitpriority=100)
        _finalizer_in = os.getpid()
    _hand_over_in_the_caller(pipe)


def _hand_over_in_the_caller(pipe: Pipeline) -> None:
    """In a worker, each value is sent in the calling thread, before ``add_*`` returns.

    The completion thread exists so that the *training* thread never waits for MXNet's
    engine nor for a socket; a worker is not the training thread, and it may be killed
    at any moment (below).  Measured: a worker SIGTERMed a few milliseconds after its
    last ``add_*`` lost everything it had logged, its completion thread not yet
    scheduled on a loaded machine.  Called with the pipeline's lock held (``submit``),
    so sends keep the call order; an NDArray's engine copy is waited for here.
    """
    completion = pipe.completion

    def hand_over(item: tuple[Any, ...]) -> None:
        if item is STOP:
            completion.queue.put(STOP)  # the idle completion thread ends
            return
        pending = item[-1]
        payload = None
        if pending is not None:
            try:
                pending()
            except Exception as exc:  # the value could not be computed: a SKIP, as in the thread
                payload = skip_descriptor(item, exc)
        if payload is None:
            payload = pack_descriptor(*item[:-1])
        pipe._last_sent = item[1]  # counted sent (and lost if the sidecar dies now), as _send does
        try:
            pipe.supervisor.send([payload])
        except ChannelClosed:
            pass  # the receiver thread explains the sidecar's end and counts what went with it

    completion.put = hand_over  # type: ignore[assignment]


def _after_fork_in_child() -> None:
    global _join_lock
    _join_lock = threading.Lock()  # another thread of the parent may have held it at the fork
    for writer in list(_tracked):
        pipe = writer._pipe
        if pipe is not None and not pipe.closed:
            writer._pipe = ForkedPipeline(writer)  # type: ignore[assignment]


def reconnect(args: dict[str, Any]) -> SidecarWriter:
    """Unpickle a writer: one with the same arguments, which joins the node's sidecar.

    One per process and arguments: a writer passed with every task of a pool is
    unpickled once per task, and each new writer would be a new producer (a segment,
    a connection, two threads) until the worker exits.
    """
    from .writer import SidecarWriter

    key = (os.getpid(), json.dumps(args, sort_keys=True, default=repr))
    writer = _reconnected.get(key)
    if writer is not None and (writer._pipe is None or not writer._pipe.closed):
        return writer
    writer = SidecarWriter(**args)
    _reconnected[key] = writer
    if writer._pipe is not None and _in_multiprocessing_child():
        joined_in_child(writer._pipe)  # a pool's task argument: the pool ends the worker
    return writer


def _in_multiprocessing_child() -> bool:
    mp = sys.modules.get("multiprocessing")
    return mp is not None and mp.parent_process() is not None


os.register_at_fork(after_in_child=_after_fork_in_child)
