"""The training thread's side of the transport: sequence numbers, admission, spans.

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
``max_queue`` bounds memory end to end; ``slab_mb`` bounds the arrays.  The other
halves of the pipeline: ``feedback.py`` (what comes back, on the helper threads) and
``pipeline.py`` (construction, flush, stats, close).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import WriterClosed
from ..wire.arena import SpanAllocator
from ..wire.descriptors import Kind, Op
from .capture import EngineCapture, NDArrayInfo
from .completion import CompletionThread
from .feedback import SidecarFeedback

__all__ = ["Admission", "Part"]

_KIND_NAMES = {k: k.name.lower() for k in Kind}  # Enum.name is a property: not on the drop path
_ITEM = Op.ITEM  # a module global: Op.ITEM is a lookup on the enum class per call


class Part(NamedTuple):
    """One array of an item: its layout in the span and how to put it there."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    fill: Callable[[Any, int], Callable[[], Any] | None]


class Admission(SidecarFeedback):
    """The ``add_*`` half of :class:`~.pipeline.Pipeline`: what the training thread runs
    (its state is declared here and in SidecarFeedback, and set up by Pipeline)."""

    max_queue: int
    completion: CompletionThread
    queued_bytes_total: int
    _error_raised: bool
    _engine: EngineCapture | None
    _mxnet_imported: Callable[[], None]  # called once, when the first NDArray is logged

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
            self._mxnet_imported()  # pipeline.py: our exit hook now runs before MXNet's
        return self._engine


def _wait_all(waits: list[Callable[[], Any]]) -> Callable[[], None]:
    def wait() -> None:
        for w in waits:
            w()

    return wait
