"""The first-fit span allocator and the shared-memory segment's ownership."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mxsidecar.wire.arena import ALIGN, Arena, SpanAllocator, segment_name_prefix


def test_first_fit_reuses_lowest_address() -> None:
    a = SpanAllocator(1024)
    x = a.allocate(100)
    y = a.allocate(100)
    assert (x, y) == (0, 128)
    a.free(x)
    assert a.allocate(10) == 0  # warm pages first
    assert a.allocate(1024) is None
    assert a.fits_ever(1024) and not a.fits_ever(1025)


def test_coalescing_restores_one_block() -> None:
    a = SpanAllocator(4096)
    spans = [a.allocate(64) for _ in range(64)]
    assert a.allocate(1) is None
    for s in spans[::2] + spans[1::2]:
        a.free(s)
    assert a.largest_free == 4096 and a.used_bytes == 0


def test_double_free_is_an_error() -> None:
    a = SpanAllocator(1024)
    x = a.allocate(1)
    a.free(x)
    with pytest.raises(KeyError):
        a.free(x)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 700)), max_size=200))
def test_allocator_never_overlaps(ops: list[tuple[bool, int]]) -> None:
    a = SpanAllocator(8192)
    live: dict[int, int] = {}
    for alloc, n in ops:
        if alloc or not live:
            off = a.allocate(n)
            if off is None:
                assert a.largest_free < SpanAllocator.aligned(n)
                continue
            assert off % ALIGN == 0 and off + n <= 8192
            for o, m in live.items():
                assert off + n <= o or o + m <= off
            live[off] = n
        else:
            off = min(live)
            a.free(off)
            del live[off]
        assert a.used_bytes == sum(SpanAllocator.aligned(m) for m in live.values())


def test_segment_create_attach_unlink() -> None:
    arena = Arena.create(1 << 16)
    try:
        assert arena.name.startswith(segment_name_prefix())
        assert os.path.exists(f"/dev/shm/{arena.name}")
        other = Arena.attach(arena.name)
        arena.view(128, 5)[:] = b"hello"
        assert bytes(other.view(128, 5)) == b"hello"
        assert other.allocator is None  # only the owner allocates
        other.close()
    finally:
        arena.close()
        arena.unlink()
    assert not os.path.exists(f"/dev/shm/{arena.name}")
    arena.unlink()  # idempotent


def test_oversized_segment_is_refused_clearly() -> None:
    st_ = os.statvfs("/dev/shm")
    with pytest.raises(ValueError, match="slab_mb"):
        Arena.create(st_.f_bavail * st_.f_frsize + (1 << 30))
