"""The on_full policy, driven without threads or sleeps (clock and wait injected)."""

from __future__ import annotations

import pytest

from mxsidecar.errors import BackpressureTimeout
from mxsidecar.training.backpressure import FlowControl


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_admits_when_room() -> None:
    fc = FlowControl("block", 5.0, FakeClock())
    assert fc.admit(lambda: 42, lambda t: pytest.fail("no wait"), "scalar", "x") == 42
    assert fc.blocked_calls == 0


def test_drop_counts_per_kind_and_tag() -> None:
    fc = FlowControl("drop", None, FakeClock())
    for _ in range(3):
        assert fc.admit(lambda: "max_queue", lambda t: pytest.fail("no wait"), "histogram", "w") is None
    fc.admit(lambda: "slab_mb", lambda t: None, "image", "x")
    assert fc.dropped == {("histogram", "w"): 3, ("image", "x"): 1}
    assert fc.dropped_total == 4


def test_block_waits_until_room() -> None:
    clock = FakeClock()
    results = iter(["slab_mb", "slab_mb", 7])
    waits: list[float | None] = []

    def wait(t: float | None) -> None:
        waits.append(t)
        clock.now += 1.0

    fc = FlowControl("block", 5.0, clock)
    assert fc.admit(lambda: next(results), wait, "image", "x") == 7
    assert waits == [5.0, 4.0]
    assert fc.blocked_seconds == pytest.approx(2.0) and fc.blocked_calls == 1


@pytest.mark.parametrize("limit", ["max_queue", "slab_mb"])
def test_block_times_out_naming_the_limit(limit: str) -> None:
    clock = FakeClock()

    def wait(t: float | None) -> None:
        clock.now += 2.0

    fc = FlowControl("block", 5.0, clock)
    with pytest.raises(BackpressureTimeout, match=limit) as info:
        fc.admit(lambda: limit, wait, "scalar", "loss")
    assert "block_timeout" in str(info.value) and "loss" in str(info.value)


def test_block_propagates_a_dead_sidecar() -> None:
    class Dead(Exception):
        pass

    def check() -> None:
        raise Dead()

    fc = FlowControl("block", None, FakeClock())
    with pytest.raises(Dead):
        fc.admit(lambda: "max_queue", lambda t: None, "scalar", "x", check)


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="on_full"):
        FlowControl("wait", 1.0)  # type: ignore[arg-type]
