"""Arrays into arena spans, and the completion thread that hands descriptors over.

Capture is the training thread's only real work per array:

* a numpy array is already in host memory: one ``np.copyto`` into its span (a
  memcpy, the unavoidable cost);
* an MXNet NDArray is copied by MXNet's own engine: ``value.copyto(slab)`` where
  ``slab`` is an NDArray wrapping the span (``mx.nd.from_numpy(view, zero_copy=True)``).
  The copy is pushed onto the dependency engine and runs after whatever computes
  ``value``, so the caller returns at once, never waiting on the engine
  (invariant 1), from any context: a GPU array is copied device-to-host by the engine.

This is the only module that imports mxnet, and only when an NDArray is logged.

The completion thread takes items strictly in ``seq`` order.  For an item whose copy
is still pending on the engine it waits (MXNet releases the GIL while it does), and
only then packs the descriptor and sends it, so the sidecar never reads a span
before its bytes are there and the file's order is the order of the calls, however
fast or slow each value was to compute (invariant 4).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..wire.descriptors import SCALAR_ENTRY, SCALARS_OP, Kind, Op, pack_descriptor
from ..wire.framing import ChannelClosed

__all__ = ["STOP", "CompletionThread", "copy_numpy", "skip_descriptor"]

MAX_BATCH = 512  # frames per sendall; bounds the latency of the first one in a burst
# After waking for the first item of a burst, the thread sleeps this long before it
# drains the queue.  Every time this thread takes the GIL while the training thread is
# inside one of MXNet's ctypes calls (each releases the GIL), the training thread must
# wait to get it back: a thread switch, tens of microseconds on a busy 2-core box.
# Waking once per burst instead of once per item keeps add_* at its own cost; the
# price is up to this much extra latency before values reach the sidecar.
BATCH_DELAY = 0.002

# ... but not when the last batch held this many items: a sustained burst (a caller
# blocked on a full queue, refilling it at each progress report), where the delay
# would only leave the sidecar idle while the caller waits.
BURST_ITEMS = 64

# Values per SCALARS frame.  The sidecar reports progress after each frame, so under
# a sustained burst (max_queue=1024 full, on_full='block') a blocked caller refills
# the queue while the sidecar writes the next frames, instead of after a whole batch.
SCALARS_PER_FRAME = 128

STOP = ("stop",)  # sentinel: the completion thread exits after what precedes it


def copy_numpy(buf: Any, offset: int, array: np.ndarray[Any, Any]) -> None:
    """Copy ``array`` into the arena buffer at ``offset``, C-contiguous, same dtype."""
    dst: np.ndarray[Any, Any] = np.ndarray(array.shape, dtype=array.dtype, buffer=buf, offset=offset)
    np.copyto(dst, array, casting="no")


def is_ndarray(value: Any) -> bool:
    """True for an MXNet NDArray (``mx.nd`` or ``mx.np``), without importing mxnet.

    An object from mxnet's modules exists only if mxnet was imported, so this never
    pays for the import itself.  Raises TypeError for something that looks like an
    NDArray while mxnet cannot be found (a stale pickle, a mock, a broken install).
    """
    mx = sys.modules.get("mxnet")
    if mx is not None:
        return isinstance(value, mx.nd.NDArray)
    if type(value).__module__.split(".")[0] == "mxnet" or (
        hasattr(value, "copyto") and hasattr(value, "wait_to_read") and hasattr(value, "context")
    ):
        raise TypeError(
            f"got a {type(value).__module__}.{type(value).__name__}, which looks like an MXNet NDArray, "
            "but mxnet is not imported in this process; install mxnet (pip install mxsidecar[mxnet]) "
            "or pass a numpy array"
        )
    return False


class NDArrayInfo(NamedTuple):
    """What the caller may know of an NDArray without waiting on the engine."""

    shape: tuple[int, ...]
    dtype: str  # numpy name of the dtype the slab will hold
    nbytes: int
    size: int
    convert: bool  # the source needs an engine-side conversion first (sparse, mx.np, int8)


# from_numpy(zero_copy) builds its DLPack tensor from a fixed dtype table that lacks
# int8 (mxnet 1.9.1): such arrays are widened on the engine, asynchronously.
_WIDEN = {"int8": "int32"}


def ndarray_info(value: Any) -> NDArrayInfo:
    """Shape, slab dtype and size; reads metadata only, which MXNet has without a sync.

    Each MXNet property is a ctypes call, and every ctypes call releases the GIL: with
    the completion thread runnable, each one can hand the GIL away and cost a thread
    switch.  So this reads the shape and the dtype once each, and nothing else.
    """
    shape = value.shape
    if not shape and not sys.modules["mxnet"].util.is_np_shape():
        # Outside numpy-shape semantics MXNet cannot copy (or even reshape) a 0-d array.
        raise ValueError(
            "a 0-d mx.np array can only be logged under mx.npx.set_np() (numpy shape semantics); "
            "pass a one-element array instead"
        )
    src_dtype = np.dtype(value.dtype).name
    dtype = _WIDEN.get(src_dtype, src_dtype)
    size = 1
    for d in shape:
        size *= d
    mx = sys.modules["mxnet"]
    convert = dtype != src_dtype or isinstance(value, (mx.nd.sparse.BaseSparseNDArray, mx.np.ndarray))
    return NDArrayInfo(shape, dtype, size * np.dtype(dtype).itemsize, size, convert)


class EngineCapture:
    """Pushes NDArray -> slab copies onto MXNet's engine, with cached slab wrappers.

    A zero-copy wrapper costs ~20 us to build, an engine push ~15 us; with first-fit
    spans the same (offset, shape, dtype) keys recur every step, so the cache makes
    steady-state capture one push.  The wrappers pin the arena mapping; ``clear()``
    drops them before the arena is closed.
    """

    MAX_WRAPPERS = 512

    def __init__(self) -> None:
        import mxnet as mx

        self._mx = mx
        self._push = _direct_copy() or (lambda src, dst: src.copyto(dst))
        self._wrappers: OrderedDict[tuple[int, tuple[int, ...], str], Any] = OrderedDict()
        # Keys whose copy failed, appended by the completion thread (list.append is
        # atomic) and evicted here: a failed engine op may leave its exception on
        # the wrapper's engine variable, so the wrapper is not reused.
        self._poisoned: list[tuple[int, tuple[int, ...], str]] = []

    def _wrapper(self, buf: Any, offset: int, info: NDArrayInfo) -> Any:
        while self._poisoned:
            self._wrappers.pop(self._poisoned.pop(), None)
        key = (offset, info.shape, info.dtype)
        w = self._wrappers.get(key)
        if w is None:
            # The view must hold a buffer export on the mapping: while MXNet holds it
            # (from_numpy increfs it until the engine is done with the wrapper's memory)
            # the arena then cannot be unmapped under a pending copy, which close() after
            # a timeout would otherwise do, leaving the engine to write into unmapped
            # memory (a segfault once the value is computed). np.ndarray(buffer=...)
            # holds none, nor does np.frombuffer of the mmap itself before numpy 1.20
            # (it keeps the object, not the export); a memoryview is the export on any.
            view = np.frombuffer(memoryview(buf), dtype=info.dtype, count=info.size, offset=offset)
            view = view.reshape(info.shape)
            w = self._mx.nd.from_numpy(view, zero_copy=True)
            self._wrappers[key] = w
            if len(self._wrappers) > self.MAX_WRAPPERS:
                self._wrappers.popitem(last=False)
        else:
            self._wrappers.move_to_end(key)
        return w

    def start(self, value: Any, info: NDArrayInfo, buf: Any, offset: int) -> Callable[[], Any]:
        """Push the copy; return what the completion thread calls to wait for it.

        The wrapper aliases arena memory that a later array may reuse with another
        shape (another wrapper, another engine variable).  That is safe: a span is
        reused only after the sidecar released it, which it does only after the
        completion thread saw this copy finish.
        """
        if info.convert:
            mx = self._mx
            if isinstance(value, mx.np.ndarray):
                value = value.as_nd_ndarray()  # mx.np arrays copy only into mx.np arrays; a view
            if isinstance(value, mx.nd.sparse.BaseSparseNDArray):
                value = value.tostype("default")  # densified on the engine
            if np.dtype(value.dtype).name != info.dtype:
                value = value.astype(info.dtype)  # engine op, see _WIDEN
        dst = self._wrapper(buf, offset, info)
        if self._mx.autograd.is_recording():
            with self._mx.autograd.pause():  # our copy is not part of the user's graph
                self._push(value, dst)
        else:
            self._push(value, dst)
        poisoned = self._poisoned
        key = (offset, info.shape, info.dtype)

        def wait() -> None:  # runs on the completion thread; MXNet releases the GIL
            try:
                dst.wait_to_read()
            except BaseException:
                poisoned.append(key)
                raise

        return wait

    def clear(self) -> None:
        self._wrappers.clear()


def _direct_copy() -> Callable[[Any, Any], None] | None:
    """``src.copyto(dst)`` as one call of MXNet's C API, ``MXImperativeInvokeEx``.

    ``NDArray.copyto`` reaches the same call through ~10 us of generic Python (op
    lookup, ctypes arrays built per call); on a 2-core machine whose cores MXNet's
    own threads are busy on, each of those microseconds is stretched several times.
    The arrays here are built once and reused: callers hold the pipeline lock.
    Returns None (use ``copyto``) if this mxnet lacks the entry points.
    """
    import ctypes

    try:
        from mxnet.base import _LIB, NDArrayHandle, c_str, check_call

        op = ctypes.c_void_p()
        check_call(_LIB.NNGetOpHandle(c_str("_copyto"), ctypes.byref(op)))
        invoke = _LIB.MXImperativeInvokeEx
    except (ImportError, AttributeError, OSError):  # pragma: no cover - other mxnet builds
        return None
    inputs = (NDArrayHandle * 1)()
    outputs = (NDArrayHandle * 1)()
    out_ptr = ctypes.cast(outputs, ctypes.POINTER(NDArrayHandle))
    num_out = ctypes.c_int(1)
    out_stypes = ctypes.POINTER(ctypes.c_int)()
    refs = (ctypes.byref(num_out), ctypes.byref(out_ptr), ctypes.byref(out_stypes))

    def push(src: Any, dst: Any) -> None:
        inputs[0] = src.handle
        outputs[0] = dst.handle
        num_out.value = 1
        check_call(invoke(op, 1, inputs, refs[0], refs[1], 0, None, None, refs[2]))

    return push


class CompletionThread(threading.Thread):
    """Sends descriptors in the order they were logged, once their data is in place.

    Items are tuples ``(op, seq, kind, tag, step, wall_time, run, number, text,
    offset, nbytes, dtype, shape, options, pending)`` where ``pending`` is None or a
    callable that returns once the span holds the value (or raises if the value could
    not be computed: the item is then sent as SKIP, with the reason).
    """

    def __init__(self, send: Callable[[list[bytes], int], None], on_failure: Callable[[BaseException], None]) -> None:
        super().__init__(name="mxsidecar-completion", daemon=True)
        self._send = send
        self._on_failure = on_failure
        self.queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.put = self.queue.put  # the training thread's whole cost of a hand-off
        # True while waiting for an engine copy: close() names MXNet's engine, not the
        # sidecar, when it gives up on a value that was never computed.
        self.waiting_for_engine = False

    def run(self) -> None:
        """``send(payloads, last_seq)`` gets the frames of a batch and the batch's last
        seq, control descriptors included.

        Consecutive float scalars (the kind logged by the thousand: no span, no text,
        no options) go as one SCALARS frame (``wire/descriptors.py``): one struct pack
        per value here, and one frame for the sidecar to walk, instead of a framed
        descriptor each.  This thread holds the GIL while it packs, and the training
        thread wants it back, so the per-value cost here is the caller's cost too.
        """
        q = self.queue
        payloads: list[bytes] = []
        entries: list[bytes] = []  # the SCALARS frame being built, in seq order
        last = [0]
        pack_entry = SCALAR_ENTRY.pack
        previous = 0  # items in the last batch
        item_op, scalar_kind = int(Op.ITEM), int(Kind.SCALAR)

        def send() -> None:
            if entries:
                payloads.append(SCALARS_OP + b"".join(entries))
                entries.clear()
            if payloads:
                self._send(payloads[:], last[0])
                payloads.clear()

        try:
            while True:
                batch = [q.get()]
                # FLUSH, CLOSE, STATS and STOP have a caller waiting on them and end a
                # burst rather than start one: no reason to wait for company.
                if batch[0] is not STOP and batch[0][0] == Op.ITEM and previous < BURST_ITEMS:
                    time.sleep(BATCH_DELAY)
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(q.get_nowait())
                    except queue.Empty:
                        break
                for item in batch:
                    if item is STOP:
                        send()
                        return
                    op, seq, kind, tag, step, wall, run, number, text, _, nbytes, _, _, options, pending = item
                    if kind == scalar_kind and op == item_op and pending is None and not (nbytes or text or options):
                        tag_b = tag.encode()
                        run_b = run.encode()
                        entries.append(pack_entry(seq, step, wall, number, len(tag_b), len(run_b)) + tag_b + run_b)
                        last[0] = seq
                        if len(entries) >= SCALARS_PER_FRAME:
                            payloads.append(SCALARS_OP + b"".join(entries))
                            entries.clear()
                        continue
                    if entries:  # the scalars before this item go first: order is seq order
                        payloads.append(SCALARS_OP + b"".join(entries))
                        entries.clear()
                    if pending is not None:
                        send()  # let the sidecar work while we wait on the engine
                        self.waiting_for_engine = True
                        try:
                            pending()
                        except Exception as exc:
                            payloads.append(skip_descriptor(item, exc))
                            last[0] = seq
                            continue
                        finally:
                            self.waiting_for_engine = False
                    payloads.append(pack_descriptor(*item[:-1]))
                    last[0] = seq
                send()
                previous = len(batch)
                # Each item's tuple (and numpy views it may pin) goes now, not at the next burst.
                del batch, item, pending
        except ChannelClosed:
            # The sidecar is gone for good (the pipeline did not restart it): the
            # receiver thread explains why, and what is still queued is lost with it.
            pass
        except BaseException as exc:
            # A bug on our side must not leave callers waiting on a thread that is gone.
            self._on_failure(exc)


def skip_descriptor(item: tuple[Any, ...], exc: BaseException) -> bytes:
    _op, seq, kind, tag = item[:4]
    return pack_descriptor(Op.SKIP, seq, kind, tag, text=f"{type(exc).__name__}: {exc}")
