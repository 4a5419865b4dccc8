"""The shared-memory arena: one segment, spans allocated per array, freed in bulk.

Ownership (invariant 6): the training process creates the segment and unlinks it on
close; the sidecar attaches by name and unlinks it only when it outlives its parent.
Neither side registers it with multiprocessing's resource tracker: on CPython < 3.13
``SharedMemory`` registers even when it only attaches, so the tracker of whichever
process exits first unlinks a segment the other still uses (CPython gh-82300).  We
call ``shm_open`` ourselves instead and keep cleanup in our own hands.

Allocation is first-fit over a sorted free list.  First-fit keeps reusing the lowest
addresses, so a steady logging loop touches the same warm pages over and over: copying
into a fresh 4 MB span costs about 3 ms of page faults, a warm one about 400 us
(``python perf/bench_arena.py``).
"""

from __future__ import annotations

import bisect
import mmap
import os
import secrets

try:  # CPython's own binding of shm_open/shm_unlink, what SharedMemory uses
    import _posixshmem
except ImportError:  # pragma: no cover - non-POSIX platforms
    _posixshmem = None

__all__ = ["ALIGN", "Arena", "SpanAllocator", "segment_name_prefix"]

ALIGN = 64  # cache-line (and AVX-512) alignment of every span
SHM_DIR = "/dev/shm"


def segment_name_prefix(pid: int | None = None) -> str:
    """Segment names start with this, so a leak is easy to spot in /dev/shm."""
    return f"mxsidecar-{os.getpid() if pid is None else pid}-"


class SpanAllocator:
    """First-fit allocator of aligned spans inside ``[0, size)``; no I/O, no locking.

    The caller serialises access (the writer holds its lock around it).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._free_offsets: list[int] = [0]  # sorted, parallel to _free_sizes
        self._free_sizes: list[int] = [size]
        self._used: dict[int, int] = {}
        self.used_bytes = 0

    @staticmethod
    def aligned(nbytes: int) -> int:
        return max(ALIGN, (nbytes + ALIGN - 1) // ALIGN * ALIGN)

    def allocate(self, nbytes: int) -> int | None:
        """Offset of a new span of at least ``nbytes``, or None if no free block fits."""
        need = self.aligned(nbytes)
        for i, block in enumerate(self._free_sizes):
            if block >= need:
                offset = self._free_offsets[i]
                if block == need:
                    del self._free_offsets[i]
                    del self._free_sizes[i]
                else:
                    self._free_offsets[i] = offset + need
                    self._free_sizes[i] = block - need
                self._used[offset] = need
                self.used_bytes += need
                return offset
        return None

    def free(self, offset: int) -> None:
        size = self._used.pop(offset)  # KeyError: a double free is a bug, not a no-op
        self.used_bytes -= size
        i = bisect.bisect_left(self._free_offsets, offset)
        # Coalesce with the following block, then with the preceding one.
        if i < len(self._free_offsets) and offset + size == self._free_offsets[i]:
            size += self._free_sizes[i]
            del self._free_offsets[i]
            del self._free_sizes[i]
        if i > 0 and self._free_offsets[i - 1] + self._free_sizes[i - 1] == offset:
            self._free_sizes[i - 1] += size
        else:
            self._free_offsets.insert(i, offset)
            self._free_sizes.insert(i, size)

    def fits_ever(self, nbytes: int) -> bool:
        """Whether a span this large could be allocated once everything is freed."""
        return self.aligned(nbytes) <= self.size

    @property
    def largest_free(self) -> int:
        return max(self._free_sizes, default=0)


class Arena:
    """A named POSIX shared-memory segment mapped into this process."""

    def __init__(self, name: str, buf: mmap.mmap, *, owner: bool) -> None:
        self.name = name
        self.buf = buf
        self.size = len(buf)
        self.owner = owner
        self.allocator = SpanAllocator(self.size) if owner else None
        self._closed = False

    @classmethod
    def create(cls, nbytes: int) -> Arena:
        """Create and map a new segment of ``nbytes`` (the training process does this)."""
        _require_posix()
        _check_room(nbytes)
        name = segment_name_prefix() + secrets.token_hex(4)
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            os.ftruncate(fd, nbytes)
            buf = mmap.mmap(fd, nbytes)
        except BaseException:
            _posixshmem.shm_unlink("/" + name)
            raise
        finally:
            os.close(fd)
        return cls(name, buf, owner=True)

    @classmethod
    def attach(cls, name: str) -> Arena:
        """Map an existing segment by name (the sidecar does this); no tracker involved."""
        _require_posix()
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            buf = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        return cls(name, buf, owner=False)

    def view(self, offset: int, nbytes: int) -> memoryview:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError(f"span [{offset}, {offset + nbytes}) outside arena of {self.size} bytes")
        return memoryview(self.buf)[offset : offset + nbytes]

    def close(self) -> None:
        """Unmap.  Views still exported (a numpy array over a span, an engine copy
        still pending into one) keep the mapping alive until they are collected; that
        is harmless once the name is unlinked.  Our own reference goes at once, so the
        mapping goes with the last view, not with this object."""
        if self._closed:
            return
        self._closed = True
        try:
            self.buf.close()
        except BufferError:
            self.buf = None  # type: ignore[assignment]

    def unlink(self) -> None:
        """Remove the name; safe to call from either side, twice, or after the other side."""
        try:
            _posixshmem.shm_unlink("/" + self.name)
        except FileNotFoundError:
            pass


def _require_posix() -> None:
    if _posixshmem is None:  # pragma: no cover
        raise OSError("mxsidecar needs POSIX shared memory (Linux or macOS)")


def _check_room(nbytes: int) -> None:
    """Refuse a segment larger than /dev/shm can back.

    ftruncate succeeds on an oversized tmpfs file and the first write to a page past
    the limit kills the process with SIGBUS; Docker's default /dev/shm is 64 MB.
    """
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if nbytes > free:
        raise ValueError(
            f"slab_mb={nbytes / 2**20:g} does not fit in {SHM_DIR} ({free / 2**20:.0f} MB free); "
            "pass a smaller slab_mb or enlarge /dev/shm (docker run --shm-size=...)"
        )
