"""Arrays into arena spans: a memcpy for numpy, an engine copy for an NDArray.

Capture is the training thread's only real work per array:

* a numpy array is already in host memory: one ``np.copyto`` into its span (a
  memcpy, the unavoidable cost);
* an MXNet NDArray is copied by MXNet's own engine: ``value.copyto(slab)`` where
  ``slab`` is an NDArray wrapping the span (``mx.nd.from_numpy(view, zero_copy=True)``).
  The copy is pushed onto the dependency engine and runs after whatever computes
  ``value``, so the caller returns at once, never waiting on the engine
  (invariant 1), from any context: a GPU array is copied device-to-host by the engine.
  The caller reads the array's metadata and pushes the copy through MXNet's C API
  with the GIL kept (:class:`_CApi`): none of those calls can block, and releasing
  the GIL in them is what let helper threads cut into ``add_*`` (issue 12).

This is the only module that imports mxnet, and only when an NDArray is logged.  The
thread that waits for the copies and hands the descriptors over is ``completion.py``.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import numpy as np

__all__ = ["EngineCapture", "NDArrayInfo", "copy_numpy", "is_ndarray", "ndarray_info"]


def copy_numpy(buf: Any, offset: int, array: np.ndarray[Any, Any]) -> None:
    """Copy ``array`` into the arena buffer at ``offset``, C-contiguous, same dtype."""
    dst: np.ndarray[Any, Any] = np.ndarray(array.shape, dtype=array.dtype, buffer=buf, offset=offset)
    np.copyto(dst, array, casting="no")


_NDARRAY: list[type] = []  # mxnet's NDArray class, once mxnet is imported


def is_ndarray(value: Any) -> bool:
    """True for an MXNet NDArray (``mx.nd`` or ``mx.np``), without importing mxnet.

    An object from mxnet's modules exists only if mxnet was imported, so this never
    pays for the import itself.  Raises TypeError for something that looks like an
    NDArray while mxnet cannot be found (a stale pickle, a mock, a broken install).
    """
    if _NDARRAY:
        return isinstance(value, _NDARRAY[0])
    mx = sys.modules.get("mxnet")
    if mx is not None:
        _NDARRAY.append(mx.nd.NDArray)  # the class, once: two attribute lookups fewer per call
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
_new_tuple = tuple.__new__


def ndarray_info(value: Any) -> NDArrayInfo:
    """Shape, slab dtype and size, through MXNet's own properties (one C call each).

    The reference for :meth:`EngineCapture.describe`, which reads the same two fields
    through the C API directly; tests compare the two.
    """
    shape = value.shape
    if not shape and not sys.modules["mxnet"].util.is_np_shape():
        raise ValueError(_ZERO_D)
    src_dtype = np.dtype(value.dtype).name
    dtype = _WIDEN.get(src_dtype, src_dtype)
    size = 1
    for d in shape:
        size *= d
    mx = sys.modules["mxnet"]
    convert = dtype != src_dtype or isinstance(value, (mx.nd.sparse.BaseSparseNDArray, mx.np.ndarray))
    return NDArrayInfo(shape, dtype, size * np.dtype(dtype).itemsize, size, convert)


# Outside numpy-shape semantics MXNet cannot copy (or even reshape) a 0-d array.
_ZERO_D = (
    "a 0-d mx.np array can only be logged under mx.npx.set_np() (numpy shape semantics); "
    "pass a one-element array instead"
)


class _CApi:
    """The few MXNet C functions on the caller's path, called through ``ctypes.PyDLL``.

    ``mxnet`` calls its library through ``ctypes.CDLL``, which releases the GIL around
    every call.  Releasing it is what lets another Python thread of the training
    process (the completion thread, the receiver thread) take it, and the training
    thread then waits to get it back: on a 2-core machine whose cores MXNet's workers
    hold, a thread switch of tens of microseconds, several per ``add_*``.  The calls
    here never block (metadata reads, the autograd flag, pushing an operation onto the
    engine, which returns once it is queued), so holding the GIL through them costs
    nothing and keeps the whole of ``add_*`` one uninterrupted run of the training
    thread.  ``PyDLL`` on the same path is the same loaded library (``dlopen`` returns
    the handle it already has), with the GIL kept.

    Arguments are preallocated ctypes objects, reused: callers hold the pipeline lock.
    """

    def __init__(self, mx: Any) -> None:
        import ctypes

        from mxnet.base import _LIB, NDArrayHandle, c_str, check_call
        from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP, _int64_enabled

        lib = ctypes.PyDLL(_LIB._name)
        self._check_call = check_call
        self._to_np = _DTYPE_MX_TO_NP
        self._dtypes: dict[int, tuple[str, int, bool]] = {}  # mx dtype code -> (slab dtype, itemsize, widened)
        self._sparse = mx.nd.sparse.BaseSparseNDArray
        self._mx_np = mx.np.ndarray
        self._is_np_shape = mx.util.is_np_shape

        self._ndim = ctypes.c_int()
        if _int64_enabled():  # as NDArray.shape chooses, so shapes are read alike
            self._pdata: Any = ctypes.POINTER(ctypes.c_int64)()
            self._get_shape = lib.MXNDArrayGetShapeEx64
        else:
            self._pdata = ctypes.POINTER(ctypes.c_int)()
            self._get_shape = lib.MXNDArrayGetShapeEx
        self._ndim_ref = ctypes.byref(self._ndim)
        self._pdata_ref = ctypes.byref(self._pdata)
        self._dtype = ctypes.c_int()
        self._dtype_ref = ctypes.byref(self._dtype)
        self._get_dtype = lib.MXNDArrayGetDType

        self._recording = ctypes.c_bool()
        self._recording_ref = ctypes.byref(self._recording)
        self._prev = ctypes.c_int()
        self._prev_ref = ctypes.byref(self._prev)
        self._is_recording = lib.MXAutogradIsRecording
        self._set_recording = lib.MXAutogradSetIsRecording

        op = ctypes.c_void_p()
        check_call(_LIB.NNGetOpHandle(c_str("_copyto"), ctypes.byref(op)))
        self._op = op
        self._invoke = lib.MXImperativeInvokeEx
        self._inputs = (NDArrayHandle * 1)()
        self._outputs = (NDArrayHandle * 1)()
        out_ptr = ctypes.cast(self._outputs, ctypes.POINTER(NDArrayHandle))
        self._num_out = ctypes.c_int(1)
        out_stypes = ctypes.POINTER(ctypes.c_int)()
        self._refs = (ctypes.byref(self._num_out), ctypes.byref(out_ptr), ctypes.byref(out_stypes))
        self._keep = (out_ptr, out_stypes)
        # Waiting is the one call that blocks: through mxnet's CDLL, GIL released.
        self.wait_to_read = _LIB.MXNDArrayWaitToRead

    def describe(self, value: Any) -> NDArrayInfo:
        """:func:`ndarray_info` in two C calls and a table lookup."""
        handle = value.handle
        rc = self._get_shape(handle, self._ndim_ref, self._pdata_ref) or self._get_dtype(handle, self._dtype_ref)
        if rc:
            self._check_call(rc)
        ndim = self._ndim.value
        if ndim < 0:  # shape unknown (deferred initialization): say what MXNet says
            return ndarray_info(value)
        shape = (self._pdata[0],) if ndim == 1 else tuple(self._pdata[:ndim])
        if not ndim and not self._is_np_shape():
            raise ValueError(_ZERO_D)
        code = self._dtype.value
        known = self._dtypes.get(code)
        if known is None:
            # np.dtype(...).name runs Python code in numpy (~50 us with the engine busy):
            # once per MXNet dtype, not per call.
            src = np.dtype(self._to_np[code]).name
            slab = _WIDEN.get(src, src)
            known = self._dtypes[code] = (slab, np.dtype(slab).itemsize, slab != src)
        slab, itemsize, widened = known
        size = 1
        for d in shape:
            size *= d
        convert = widened or isinstance(value, (self._sparse, self._mx_np))
        # tuple.__new__ directly: NDArrayInfo(...) runs namedtuple's __new__, a Python frame.
        return _new_tuple(NDArrayInfo, (shape, slab, size * itemsize, size, convert))

    def push_copy(self, src: Any, dst: Any) -> None:
        """``src.copyto(dst)`` as one ``MXImperativeInvokeEx``, outside autograd.

        ``NDArray.copyto`` reaches the same call through ~10 us of generic Python (op
        lookup, ctypes arrays built per call).  Recording is paused around the push, as
        ``autograd.pause()`` would (our copy is not part of the user's graph), by the
        same two C calls it makes, without its Python.
        """
        self._inputs[0] = src.handle
        self._outputs[0] = dst.handle
        self._num_out.value = 1
        rc = self._is_recording(self._recording_ref)
        if rc:
            self._check_call(rc)
        refs = self._refs
        if self._recording.value:
            self._check_call(self._set_recording(0, self._prev_ref))
            try:
                rc = self._invoke(self._op, 1, self._inputs, refs[0], refs[1], 0, None, None, refs[2])
            finally:
                self._check_call(self._set_recording(1, self._prev_ref))
        else:
            rc = self._invoke(self._op, 1, self._inputs, refs[0], refs[1], 0, None, None, refs[2])
        if rc:
            self._check_call(rc)


class _PythonApi:
    """:class:`_CApi`'s four operations through mxnet's own Python API (each C call
    then releases the GIL, and ``copyto`` runs its generic Python): for an mxnet build
    that lacks one of the C functions ``_CApi`` calls."""

    def __init__(self, mx: Any) -> None:
        from mxnet.base import _LIB, check_call

        self._autograd = mx.autograd
        self._check_call = check_call
        self.wait_to_read = _LIB.MXNDArrayWaitToRead
        self.describe = ndarray_info

    def push_copy(self, src: Any, dst: Any) -> None:
        if self._autograd.is_recording():
            with self._autograd.pause():  # our copy is not part of the user's graph
                src.copyto(dst)
        else:
            src.copyto(dst)


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
        try:
            self._api: _CApi | _PythonApi = _CApi(mx)
        except (ImportError, AttributeError, OSError):  # another mxnet build: its own Python API
            self._api = _PythonApi(mx)
        self.describe = self._api.describe
        self._push = self._api.push_copy
        self._wrappers: OrderedDict[tuple[int, tuple[int, ...], str], Any] = OrderedDict()
        # Keys whose copy failed, appended by the completion thread (list.append is
        # atomic) and evicted here: a failed engine op may leave its exception on
        # the wrapper's engine variable, so the wrapper is not reused.
        self._poisoned: list[tuple[int, tuple[int, ...], str]] = []

    def _new_wrapper(self, buf: Any, offset: int, info: NDArrayInfo, key: tuple[Any, ...]) -> Any:
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
        return w

    def start(self, value: Any, info: NDArrayInfo, buf: Any, offset: int) -> Callable[[], Any]:
        """Push the copy; return what the completion thread calls to wait for it.

        The wrapper aliases arena memory that a later array may reuse with another
        shape (another wrapper, another engine variable).  That is safe: a span is
        reused only after the sidecar released it, which it does only after the
        completion thread saw this copy finish.

        Steady state is a dict hit and one push: with the engine busy every Python
        call here is stretched several times, so nothing else runs per call.
        """
        if info[4]:  # convert
            value = self._convert(value, info)
        wrappers = self._wrappers
        poisoned = self._poisoned
        while poisoned:
            wrappers.pop(poisoned.pop(), None)
        key = (offset, info[0], info[1])
        dst = wrappers.get(key)
        if dst is None:
            dst = self._new_wrapper(buf, offset, info, key)
        else:
            wrappers.move_to_end(key)
        self._push(value, dst)
        return partial(_wait, self._api, dst, key, poisoned)

    def _convert(self, value: Any, info: NDArrayInfo) -> Any:
        mx = self._mx
        if isinstance(value, mx.np.ndarray):
            value = value.as_nd_ndarray()  # mx.np arrays copy only into mx.np arrays; a view
        if isinstance(value, mx.nd.sparse.BaseSparseNDArray):
            value = value.tostype("default")  # densified on the engine
        if np.dtype(value.dtype).name != info.dtype:
            value = value.astype(info.dtype)  # engine op, see _WIDEN
        return value

    def clear(self) -> None:
        self._wrappers.clear()


def _wait(api: _CApi | _PythonApi, dst: Any, key: tuple[Any, ...], poisoned: list[Any]) -> None:
    """What the completion thread calls to wait for one engine copy (GIL released)."""
    rc = api.wait_to_read(dst.handle)
    if rc:
        poisoned.append(key)
        api._check_call(rc)  # MXNetError: the value could not be computed
