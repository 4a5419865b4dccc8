"""README's promises, end to end: a real ``SidecarWriter``, a real sidecar, and the
event files read back with TensorBoard's own loaders.

The sidecar is held still by the fault hook's ``gate`` (``mxsidecar/sidecar/faults.py``:
it waits at an item until a file exists), and MXNet's engine by a custom operator that
waits for the test (the gate of ``test_capture.py``): every "the queue is full now" or
"the value is not computed yet" is a fact of the order of events, never a timing.
Durations appear only as lower bounds the code itself guarantees (``block_timeout``,
a sleep injected in the sidecar).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import psutil
import pytest
from conftest import event_files, load_multiplexer, tensor_values, wait_until

from mxsidecar import BackpressureTimeout, SidecarWriter
from mxsidecar.sidecar.faults import ENV

pytestmark = pytest.mark.timeout(120)

HIST = np.linspace(-1.0, 1.0, 75_000, dtype=np.float32)  # 300,000 bytes: three fit in slab_mb=1, not four


def faults(monkeypatch, *specs: dict) -> None:
    monkeypatch.setenv(ENV, json.dumps(list(specs)))


@pytest.fixture
def writer(tmp_path):
    """SidecarWriter(...) closed after the test even if it fails half-way: every gate
    is opened first, so a failed assertion is reported, not a close() stuck behind it."""
    made: list[SidecarWriter] = []

    def make(*args, **kwargs) -> SidecarWriter:
        made.append(SidecarWriter(*args, **kwargs))
        return made[-1]

    yield make
    (tmp_path / "gate").touch()
    engine_gates = getattr(sys.modules.get("test_capture"), "_GATES", {})
    for opened, _, _ in list(engine_gates.values()):
        opened.set()
    for sw in made:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                sw.close()
            except Exception:
                pass  # already asserted on, or the failure being reported


def steps_by_tag(logdir: str, run: str = ".") -> dict[str, list[int]]:
    """tag -> steps, as TensorBoard's plugin multiplexer serves them."""
    mux = load_multiplexer(logdir)
    return {tag: [s for s, _ in tensor_values(mux, run, tag)] for tag in mux.Runs()[run]["tensors"]}


# -- on_full='drop' ------------------------------------------------------------------


def test_drop_counts_per_tag_and_file_is_logged_minus_dropped(tmp_path, monkeypatch, writer) -> None:
    """The sidecar is stuck at its first item, so room is a matter of counting: the
    arena holds three 300 kB histograms, the queue eight items."""
    gate = tmp_path / "gate"
    faults(monkeypatch, {"at": "encode", "action": "gate", "path": str(gate)})
    logdir = str(tmp_path / "logs")
    sw = writer(logdir, max_queue=8, slab_mb=1, on_full="drop")
    logged: dict[str, list[int]] = {"h": [], "a": [], "b": []}
    for i in range(4):
        sw.add_histogram("h", HIST, i)  # h0 h1 h2 fill the arena; h3: slab_mb is full
        logged["h"].append(i)
    for i in range(10):
        sw.add_scalar("a", float(i), i)  # a0 b0 a1 b1 a2 fill the queue (3 + 5 = 8)
        sw.add_scalar("b", float(-i), i)
        logged["a"].append(i)
        logged["b"].append(i)
    gate.touch()
    sw.flush()
    for i in range(10, 13):  # dropping is not sticky: room again, written again
        sw.add_scalar("a", float(i), i)
        logged["a"].append(i)
    sw.flush()
    stats = sw.stats()
    assert stats["dropped_by_tag"] == {"histogram/h": 1, "scalar/a": 7, "scalar/b": 8}
    assert stats["dropped"] == {"histogram": 1, "scalar": 15}
    with pytest.warns(RuntimeWarning, match=r"16 items dropped \(on_full='drop'\)"):
        sw.close()

    on_disk = steps_by_tag(logdir)
    assert on_disk == {"h": [0, 1, 2], "a": [0, 1, 2, 10, 11, 12], "b": [0, 1]}
    for tag, kind in (("h", "histogram"), ("a", "scalar"), ("b", "scalar")):
        assert len(on_disk[tag]) == len(logged[tag]) - stats["dropped_by_tag"][f"{kind}/{tag}"]


# -- on_full='block' -----------------------------------------------------------------


@pytest.mark.parametrize("limit", ["max_queue", "slab_mb"])
def test_block_timeout_names_the_limit_and_writer_recovers(tmp_path, monkeypatch, limit, writer) -> None:
    gate = tmp_path / "gate"
    faults(monkeypatch, {"at": "encode", "action": "gate", "path": str(gate)})
    logdir = str(tmp_path / "logs")
    sw = writer(logdir, max_queue=4, slab_mb=1, on_full="block", block_timeout=1.0)

    def log(i: int) -> None:
        if limit == "max_queue":
            sw.add_scalar("x", float(i), i)
        else:
            sw.add_histogram("x", HIST, i)

    for i in range(3):  # three fit either way: the queue holds 4, the arena 3 histograms
        log(i)
    if limit == "max_queue":
        log(3)
    start = time.monotonic()
    with pytest.raises(BackpressureTimeout) as info:
        log(9)
    waited = time.monotonic() - start
    msg = str(info.value)
    assert f"{limit} is full" in msg and f"raise {limit}" in msg and "block_timeout" in msg and "'x'" in msg
    assert waited >= 1.0  # it did wait block_timeout first (a lower bound: no flaky upper one)

    gate.touch()  # the sidecar catches up; the writer is usable again
    for i in range(10, 13):
        log(i)
    sw.flush()
    stats = sw.stats()
    assert stats["blocked_seconds"] >= 1.0 and stats["queued"] == 0 and stats["dropped"] == {}
    sw.close()
    first = [0, 1, 2, 3] if limit == "max_queue" else [0, 1, 2]
    assert steps_by_tag(logdir) == {"x": [*first, 10, 11, 12]}  # 9 timed out: not written


# -- flush_secs ----------------------------------------------------------------------


def fsyncs(record: str) -> list[str]:
    """Event files the sidecar fsynced, one line per fsync (the fault hook's record)."""
    if not os.path.exists(record):
        return []
    with open(record) as f:
        return [line.split(" ", 2)[2].rstrip("\n") for line in f]


def test_flush_secs_fsyncs_on_the_timer(tmp_path, monkeypatch, writer) -> None:
    """The fsync itself is observed (the hook runs right after ``os.fsync`` returns):
    reading the file would only show the write, which happens without any fsync."""
    record = str(tmp_path / "fsyncs")
    faults(monkeypatch, {"at": "fsync", "action": "record", "path": record})

    # Control: a timer that cannot fire during the test; only close() fsyncs.
    slow = writer(str(tmp_path / "slow"), flush_secs=3600)
    slow.add_scalar("x", 1.0, 0)
    slow.flush()
    (slow_file,) = event_files(str(tmp_path / "slow"))

    fast = writer(str(tmp_path / "fast"), flush_secs=0.2)
    fast.add_scalar("x", 1.0, 0)
    assert wait_until(lambda: event_files(str(tmp_path / "fast")), 30)  # the sidecar opens it as it starts
    (fast_file,) = event_files(str(tmp_path / "fast"))
    # Open, never flushed nor closed: only the timer can fsync it, and it does, again and again.
    assert wait_until(lambda: fsyncs(record).count(fast_file) >= 3, 30), fsyncs(record)
    assert slow_file not in fsyncs(record)
    fast.close()
    slow.close()
    assert fsyncs(record).count(slow_file) == 1  # close() fsyncs
    assert steps_by_tag(str(tmp_path / "fast")) == {"x": [0]}


# -- stats() -------------------------------------------------------------------------


def test_stats_values_match_what_was_done(tmp_path, monkeypatch, writer) -> None:
    """Each counter against what the test did, and bytes_written against the disk."""
    gate = tmp_path / "gate"
    sleep = 0.05
    faults(
        monkeypatch,
        {"at": "encode", "tag": "first", "action": "gate", "path": str(gate)},
        {"at": "encode", "tag": "h", "action": "sleep", "seconds": sleep},
    )
    logdir = str(tmp_path / "logs")
    sw = writer(logdir, max_queue=6, on_full="block", block_timeout=None)
    sw.add_scalar("first", 0.0, 0)
    for i in range(5):
        sw.add_scalar("x", float(i), i)
    # The queue is full (6): a seventh call blocks until the gate opens.  Blocked time is
    # measured from before the gate opens to after: at least the sleep between.

    returned = threading.Event()
    t = threading.Thread(target=lambda: (sw.add_scalar("x", 5.0, 5), returned.set()))
    t.start()
    assert wait_until(lambda: sw._pipe.flow.blocked_calls == 1, 30)
    time.sleep(0.5)
    assert not returned.is_set()
    gate.touch()
    t.join(30)
    assert returned.is_set()
    for i in range(4):
        sw.add_histogram("h", HIST, i)
    sw.add_text("t", "hello", 0)
    sw.flush()
    stats = sw.stats()
    side = stats["sidecar"]
    assert stats["queued"] == 0 and stats["in_flight"] == 0
    assert stats["dropped"] == {} and stats["dropped_by_tag"] == {} and stats["rejected"] == 0
    assert stats["blocked_seconds"] >= 0.5
    assert side["written"] == {"scalar": 7, "histogram": 4, "text": 1}
    (path,) = event_files(logdir)
    assert side["files"] == [path]
    assert side["bytes_written"] == os.path.getsize(path)  # flushed: the kernel has every byte counted
    assert set(side["busy_seconds"]) == {"scalar", "histogram", "text"}
    assert side["busy_seconds"]["histogram"] >= 4 * sleep  # the injected sleep is inside the timed part
    assert all(v > 0 for v in side["busy_seconds"].values())
    assert stats["array_bytes_queued_total"] == 4 * 300_032  # 300,000 bytes in a 64-byte aligned span
    sw.close()
    assert steps_by_tag(logdir) == {"first": [0], "x": [0, 1, 2, 3, 4, 5], "h": [0, 1, 2, 3], "t": [0]}


def test_stats_queued_and_in_flight_while_stuck(tmp_path, monkeypatch, writer) -> None:
    """queued counts everything logged and not written; in_flight what the sidecar holds.
    The sidecar is stuck at its first item (in flight), an NDArray behind it is stuck on
    the engine, so what follows it is queued but cannot have been sent."""
    mx = pytest.importorskip("mxnet")
    from test_capture import gated

    from mxsidecar.training import pipeline

    gate = tmp_path / "gate"
    faults(monkeypatch, {"at": "encode", "tag": "first", "action": "gate", "path": str(gate)})
    monkeypatch.setattr(pipeline, "STATS_TIMEOUT", 0.5)  # the STATS reply queues behind the gate too
    logdir = str(tmp_path / "logs")
    sw = writer(logdir)
    sw.add_scalar("first", 0.0, 0)
    assert wait_until(lambda: sw._pipe._last_sent == 1, 30)
    y, opened, _ = gated(mx.nd.array([3.0]))
    sw.add_scalar("pending", y, 1)
    for i in range(3):
        sw.add_scalar("x", float(i), i)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = sw.stats()
    assert (stats["queued"], stats["in_flight"]) == (5, 1)
    assert stats["sidecar"] is None  # no reply within STATS_TIMEOUT: stuck, as it is
    gate.touch()
    opened.set()
    sw.flush()
    stats = sw.stats()
    assert (stats["queued"], stats["in_flight"]) == (0, 0)
    assert stats["sidecar"]["written"] == {"scalar": 5}
    sw.close()
    assert steps_by_tag(logdir) == {"first": [0], "pending": [1], "x": [0, 1, 2]}


# -- NDArrays still pending on MXNet's engine at close() and at exit ---------------------


def test_close_with_pending_ndarrays(tmp_path, writer) -> None:
    """close() waits for values the engine has not computed yet, then writes them."""
    mx = pytest.importorskip("mxnet")

    from test_capture import gated

    logdir = str(tmp_path)
    sw = writer(logdir)
    sw.add_scalar("x", 1.0, 0)
    y, opened, ran = gated(mx.nd.array([7.0]))
    sw.add_scalar("pending", y * 2, 1)
    sw.add_histogram("pending_h", mx.nd.ones((100,)) * y, 1)
    sw.add_scalar("x", 2.0, 2)  # behind the pending ones: order is kept
    closer = threading.Thread(target=sw.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive() and not ran.is_set()  # waiting for the engine, as it must
    opened.set()
    closer.join(60)
    assert not closer.is_alive()
    mux = load_multiplexer(logdir)
    assert tensor_values(mux, ".", "pending") == [(1, pytest.approx(14.0))]
    ((step, histo),) = tensor_values(mux, ".", "pending_h")  # TensorBoard's [left, right, count] rows
    assert step == 1 and histo[:, 2].sum() == 100 and histo[0, 0] <= 7.0 <= histo[-1, 1]
    assert [s for s, _ in tensor_values(mux, ".", "x")] == [0, 2]


def test_close_timeout_with_values_never_computed(tmp_path, writer) -> None:
    """A value the engine never computes cannot be written: close(timeout) gives up, kills
    the sidecar, and counts and names the loss; nothing leaks, and the engine's late copy
    into the freed arena is harmless (the wrapper keeps the mapping alive)."""
    mx = pytest.importorskip("mxnet")
    from test_capture import gated

    from mxsidecar import SidecarError

    logdir = str(tmp_path)
    sw = writer(logdir)
    sw.add_scalar("x", 1.0, 0)
    sw.flush()
    y, opened, ran = gated(mx.nd.array([7.0]))
    sw.add_scalar("pending", y, 1)
    sw.add_scalar("x", 2.0, 2)
    with pytest.warns(RuntimeWarning, match="2 lost with the sidecar"):
        with pytest.raises(SidecarError, match="2 logged items were not written") as info:
            sw.close(timeout=2.0)
    assert "MXNet's engine" in str(info.value)
    opened.set()  # the engine copies into the span now, after close()
    assert ran.wait(30)
    assert wait_until(lambda: not sw._pipe.completion.is_alive(), 30)
    assert steps_by_tag(logdir) == {"x": [0]}


EXIT_SCRIPT = """
import sys, threading
if {mxnet_first}:
    import mxnet as mx
from mxsidecar import SidecarWriter
import mxnet as mx

opened = threading.Event()

class Gate(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        opened.wait(120)
        self.assign(out_data[0], req[0], in_data[0])

@mx.operator.register("gate")
class GateProp(mx.operator.CustomOpProp):
    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []
    def create_operator(self, ctx, shapes, dtypes):
        return Gate()

def open_when_main_ends():
    threading.main_thread().join()  # returns as the interpreter starts shutting down
    opened.set()

threading.Thread(target=open_when_main_ends, daemon=True).start()
sw = SidecarWriter({logdir!r})
print(sw.stats()["sidecar_pid"], sw._pipe.arena.name, flush=True)
sw.add_scalar("x", 1.0, 0)
y = mx.nd.Custom(mx.nd.array([7.0]), op_type="gate")
sw.add_scalar("pending", y * 2, 1)
sw.add_histogram("pending_h", mx.nd.ones((100,)) * y, 1)
sw.add_scalar("x", 2.0, 2)
# no close(): the values cannot exist before this script's last line has run
"""


@pytest.mark.parametrize("mxnet_first", [True, False], ids=["mxnet_first", "mxsidecar_first"])
def test_exit_with_pending_ndarrays(tmp_path, mxnet_first) -> None:
    """MXNet shuts its engine down at exit (an atexit hook registered when it is
    imported); whichever was imported first, the writer is closed before that, so the
    pending values are computed and written, within the subprocess's timeout (the
    writer's own exit timeout is 60 s: a wait that long fails this test)."""
    pytest.importorskip("mxnet")
    logdir = str(tmp_path)
    script = EXIT_SCRIPT.format(mxnet_first=mxnet_first, logdir=logdir)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        out, err = proc.communicate(timeout=45)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    sidecar_pid, segment = out.split()[:2]
    assert "mxsidecar" not in err  # no loss reported, no error at exit
    assert not psutil.pid_exists(int(sidecar_pid)) or psutil.Process(int(sidecar_pid)).status() == "zombie"
    assert not os.path.exists(f"/dev/shm/{segment}")
    mux = load_multiplexer(logdir)
    assert tensor_values(mux, ".", "pending") == [(1, pytest.approx(14.0))]
    ((_, histo),) = tensor_values(mux, ".", "pending_h")
    assert histo[:, 2].sum() == 100 and histo[0, 0] <= 7.0 <= histo[-1, 1]
    assert [s for s, _ in tensor_values(mux, ".", "x")] == [0, 2]


TERM_SCRIPT = """
import signal, sys, time
from mxsidecar import SidecarWriter
sw = SidecarWriter({logdir!r})
for i in range(100):
    sw.add_scalar("x", float(i), i)
sw.flush()
print(sw.stats()["sidecar_pid"], sw._pipe.arena.name, flush=True)
time.sleep(120)  # until the group's SIGTERM (Python's default action: die at once)
"""


def test_sigterm_to_the_process_group_leaves_nothing(tmp_path) -> None:
    """timeout(1), Slurm's scancel and ``kill -TERM -PGID`` signal the trainer and its
    sidecar together: the trainer dies without closing, and the sidecar, which leaves the
    arena to a trainer that survives SIGTERM, must notice that this one did not."""
    import signal

    logdir = str(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", TERM_SCRIPT.format(logdir=logdir)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
        start_new_session=True,  # its own process group, as a job under a launcher
    )
    try:
        sidecar_pid, segment = proc.stdout.readline().split()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == -signal.SIGTERM
    finally:
        proc.kill()
    assert wait_until(
        lambda: not psutil.pid_exists(int(sidecar_pid)) or psutil.Process(int(sidecar_pid)).status() == "zombie", 30
    )
    assert not os.path.exists(f"/dev/shm/{segment}")
    assert steps_by_tag(logdir) == {"x": list(range(100))}
