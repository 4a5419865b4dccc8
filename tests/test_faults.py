"""Failure at every boundary, in the style of CPython's test_concurrent_futures/test_deadlock.py:
each case injects one failure and asserts one specific outcome within a timeout (pytest-timeout,
with pytest's faulthandler dump on a hang). After each: every event file parses record by
record with valid CRCs up to its last complete record, /dev/shm holds nothing of ours and no
sidecar process is left (the autouse no_leaks fixture, and the checks below for children of
killed trainers)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest
from conftest import event_files, load_multiplexer, read_events, tensor_values, wait_until

from mxsidecar import MxSidecarError, SidecarError, SidecarWriter
from mxsidecar.formats.records import TruncatedRecord, iter_records
from mxsidecar.sidecar.faults import ENV

pytestmark = pytest.mark.timeout(90)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def faults(monkeypatch, *specs: dict) -> None:
    monkeypatch.setenv(ENV, json.dumps(list(specs)))


def intact(logdir: str) -> dict[str, list[int]]:
    """Every file: whole records with valid CRCs, at most a torn last one. tag -> steps."""
    out: dict[str, list[int]] = {}
    for path in event_files(logdir):
        with open(path, "rb") as f:
            data = f.read()
        try:
            list(iter_records(data))
        except TruncatedRecord as exc:  # tolerated only at the very end (TensorBoard's rule)
            assert [r for r in iter_records(data, strict=False)][-1].offset < exc.offset
        for rec in iter_records(data, strict=False):
            from mxsidecar.formats.proto import event_pb2

            ev = event_pb2.Event.FromString(rec.data)
            for v in ev.summary.value:
                out.setdefault(v.tag, []).append(ev.step)
    return out


def log_steps(sw: SidecarWriter, tag: str, steps) -> None:
    for i in steps:
        sw.add_scalar(tag, float(i), i)


# -- the sidecar dies -------------------------------------------------------------


def test_killed_while_idle(tmp_path) -> None:
    sw = SidecarWriter(str(tmp_path))
    log_steps(sw, "x", range(10))
    sw.flush()
    os.kill(sw.stats()["sidecar_pid"], signal.SIGKILL)
    assert wait_until(lambda: sw.stats()["last_error"] is not None)
    with pytest.raises(SidecarError, match="SIGKILL"):
        sw.add_scalar("x", 1.0, 10)
    sw.close()
    assert intact(str(tmp_path)) == {"x": list(range(10))}


@pytest.mark.parametrize("action,match", [("kill", "SIGKILL"), ("exit", "status 3"), ("raise", "injected failure")])
def test_dies_while_encoding(tmp_path, monkeypatch, action, match) -> None:
    faults(monkeypatch, {"at": "encode", "tag": "boom", "action": action})
    sw = SidecarWriter(str(tmp_path))
    log_steps(sw, "ok", range(5))
    sw.flush()
    sw.add_scalar("boom", 1.0, 5)
    log_steps(sw, "ok", range(6, 9))
    with pytest.raises(SidecarError, match=match) as info:
        sw.flush(timeout=30)
    if action == "raise":  # the sidecar's own traceback, chained
        assert "RuntimeError: injected failure at encode" in str(info.value.__cause__)
    assert "logged items were not written" in str(info.value)
    with pytest.raises(SidecarError):
        sw.add_scalar("ok", 1.0, 9)
    sw.close()
    assert intact(str(tmp_path)) == {"ok": list(range(5))}


def test_killed_while_writing_leaves_only_a_torn_tail(tmp_path, monkeypatch) -> None:
    faults(monkeypatch, {"at": "write", "tag": "boom", "action": "kill"})
    sw = SidecarWriter(str(tmp_path))
    log_steps(sw, "ok", range(5))
    sw.flush()
    sw.add_scalar("boom", 1.0, 5)
    with pytest.raises(SidecarError, match="SIGKILL"):
        sw.flush(timeout=30)
    sw.close()
    (path,) = event_files(str(tmp_path))
    with pytest.raises(TruncatedRecord):
        read_events(path, strict=True)
    assert intact(str(tmp_path)) == {"ok": list(range(5))}
    mux = load_multiplexer(str(tmp_path))  # TensorBoard reads it as a file still being written
    assert [s for s, _ in tensor_values(mux, ".", "ok")] == list(range(5))


def test_exits_when_a_descriptor_arrives(tmp_path, monkeypatch) -> None:
    faults(monkeypatch, {"at": "receive", "tag": "boom", "action": "exit"})
    sw = SidecarWriter(str(tmp_path))
    sw.add_scalar("boom", 1.0, 0)
    with pytest.raises(SidecarError, match="status 3"):
        sw.close()
    sw.close()


def test_channel_closed_under_the_sidecar(tmp_path) -> None:
    sw = SidecarWriter(str(tmp_path))
    log_steps(sw, "x", range(3))
    sw.flush()
    sw._pipe.supervisor.channel.sock.shutdown(socket.SHUT_RDWR)  # as if our end vanished
    with pytest.raises(SidecarError, match="before close"):
        assert wait_until(lambda: sw.stats()["last_error"] is not None)
        sw.add_scalar("x", 3.0, 3)
    sw.close()
    assert intact(str(tmp_path)) == {"x": [0, 1, 2]}


def test_disk_full_is_one_explained_error(tmp_path) -> None:
    """RLIMIT_FSIZE on the sidecar (prlimit: no root, no tmpfs) stands in for a full
    disk: Python ignores SIGXFSZ, so its write fails with EFBIG, as on ENOSPC."""
    sw = SidecarWriter(str(tmp_path))
    sw.flush()
    psutil.Process(sw.stats()["sidecar_pid"]).rlimit(psutil.RLIMIT_FSIZE, (6000, 6000))
    with pytest.raises(SidecarError, match="File too large") as info:
        for i in range(2000):
            sw.add_scalar("x", float(i), i)
        sw.flush(timeout=30)
    assert "OSError" in str(info.value.__cause__)
    sw.close()
    (path,) = event_files(str(tmp_path))
    assert os.path.getsize(path) <= 6000
    steps = intact(str(tmp_path))["x"]
    assert steps == list(range(len(steps))) and len(steps) > 10  # whole records, in order, no hole
    with open(path, "rb") as f:
        list(iter_records(f.read()))  # cut back to the last whole record: no torn tail either


def test_logdir_deleted_under_the_sidecar(tmp_path) -> None:
    import shutil

    logdir = tmp_path / "run"
    sw = SidecarWriter(str(logdir))
    sw.add_scalar("x", 1.0, 0)
    sw.flush()
    shutil.rmtree(logdir)
    sw.add_scalar("x", 2.0, 1)
    with pytest.raises(SidecarError) as info:
        sw.flush(timeout=30)
    assert "was deleted" in str(info.value.__cause__)
    sw.close()


# -- on_error='restart' -------------------------------------------------------------


def test_restart_goes_on_and_counts_the_loss(tmp_path, monkeypatch, capsys) -> None:
    faults(monkeypatch, {"at": "encode", "tag": "boom", "action": "kill"})
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir, on_error="restart", verbose=True)
    log_steps(sw, "x", range(5))
    sw.flush()
    first = sw.stats()["sidecar_pid"]
    monkeypatch.delenv(ENV)  # the new sidecar has no fault
    with pytest.warns(RuntimeWarning, match="restart"):
        sw.add_scalar("boom", 0.0, 5)
        assert wait_until(lambda: sw.stats()["restarts"] == 1)
    log_steps(sw, "x", range(6, 10))
    sw.flush()
    stats = sw.stats()
    assert stats["sidecar_pid"] != first and stats["lost"] == 1 and "SIGKILL" in stats["last_error"]
    capsys.readouterr()
    with pytest.warns(RuntimeWarning, match=r"1 lost with the sidecar \(1 restarts\)"):
        sw.close()
    assert capsys.readouterr().out == f"mxsidecar: {logdir}: 9 items written, 0 dropped, 0 rejected, 1 lost\n"
    assert len(event_files(logdir)) == 2  # a new event file for the new sidecar
    assert intact(logdir) == {"x": [0, 1, 2, 3, 4, 6, 7, 8, 9]}
    mux = load_multiplexer(logdir)
    assert [s for s, _ in tensor_values(mux, ".", "x")] == [0, 1, 2, 3, 4, 6, 7, 8, 9]


def test_restart_gives_up_after_max_restarts(tmp_path, monkeypatch) -> None:
    faults(monkeypatch, {"at": "encode", "tag": "boom", "action": "kill"})
    sw = SidecarWriter(str(tmp_path), on_error="restart", max_restarts=2)
    with pytest.warns(RuntimeWarning):
        with pytest.raises(SidecarError, match="after 2 restarts"):
            for i in range(200):
                sw.add_scalar("boom", 0.0, i)
                sw.flush(timeout=30)
    sw.close()


# A batch and the sidecar's death race: the completion thread hands the batch to the
# channel while the receiver thread sees the sidecar go and restarts it.  Each test holds
# the completion thread at one point of its hand-off (a wrapper around the first
# sidecar's send) until the restart is complete, so the interleaving is forced, not
# hoped for; the batch is a single item ("boom") that no sidecar ever writes.


def hold_first_send(sw: SidecarWriter, before: bool) -> list[BaseException]:
    """Make the first sidecar's send wait for the restart: before the bytes go (the
    sidecar is killed first) or after (the sidecar kills itself on receiving them)."""
    pipe = sw._pipe
    sup = pipe.supervisor
    real_send = sup.send
    failures: list[BaseException] = []

    def restarted() -> None:
        with pipe._cond:
            if not pipe._cond.wait_for(lambda: pipe.restarts == 1, 60):
                failures.append(TimeoutError("no restart"))

    def send(payloads: list[bytes]) -> None:
        if before:
            os.kill(sup.pid, signal.SIGKILL)
            restarted()
            real_send(payloads)  # to the dead sidecar's channel: ChannelClosed
        else:
            real_send(payloads)  # boom's receive fault kills the sidecar
            restarted()

    sup.send = send  # type: ignore[method-assign]
    return failures


@pytest.mark.parametrize("before", [False, True], ids=["restart_after_send", "restart_before_send"])
def test_batch_sent_as_the_sidecar_dies_is_counted_lost(tmp_path, monkeypatch, before) -> None:
    faults(monkeypatch, {"at": "receive", "tag": "boom", "action": "kill"})
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir, on_error="restart")
    monkeypatch.delenv(ENV)  # the new sidecar has no fault
    log_steps(sw, "x", range(3))
    sw.flush(timeout=30)
    failures = hold_first_send(sw, before)
    with pytest.warns(RuntimeWarning, match="lost with a failed sidecar"):
        sw.add_scalar("boom", 0.0, 3)  # alone in its batch: nothing else is logged until the restart
        with sw._pipe._cond:
            assert sw._pipe._cond.wait_for(lambda: sw._pipe.restarts == 1, 60)
        log_steps(sw, "x", range(4, 7))
        sw.flush(timeout=30)
    assert not failures
    stats = sw.stats()
    assert (stats["restarts"], stats["lost"], stats["queued"], stats["in_flight"]) == (1, 1, 0, 0)
    with pytest.warns(RuntimeWarning, match=r"1 lost with the sidecar \(1 restarts\)"):
        sw.close()
    assert intact(logdir) == {"x": [0, 1, 2, 4, 5, 6]}


# -- the trainer dies -----------------------------------------------------------------

TRAINER = """
import faulthandler, os, signal, sys
from mxsidecar import SidecarWriter
sw = SidecarWriter({logdir!r})
print(sw.stats()["sidecar_pid"], sw._pipe.arena.name, flush=True)
for i in range(200):
    sw.add_scalar("x", float(i), i)
sw.flush()
for i in range(200, 300):
    sw.add_scalar("x", float(i), i)
{death}
"""


@pytest.mark.parametrize(
    "death",
    ["os.kill(os.getpid(), signal.SIGKILL)", "os._exit(1)", "faulthandler._sigsegv()"],
    ids=["sigkill", "os_exit", "segfault"],
)
def test_trainer_death_keeps_what_was_handed_over(tmp_path, death) -> None:
    logdir = str(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINER.format(logdir=logdir, death=death)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    pid_line = proc.stdout.readline().split()
    sidecar_pid, segment = int(pid_line[0]), pid_line[1]
    proc.wait(60)
    assert proc.returncode != 0
    # The sidecar notices (EOF, parent watch), writes what it has, fsyncs, unlinks, exits.
    assert wait_until(
        lambda: not psutil.pid_exists(sidecar_pid) or psutil.Process(sidecar_pid).status() == "zombie", 30
    )
    assert not os.path.exists(f"/dev/shm/{segment}")
    steps = intact(logdir)["x"]
    assert steps[:200] == list(range(200))  # everything logged before the last flush()
    assert steps == list(range(len(steps)))  # and then an unbroken prefix of the rest


def test_forked_child_of_a_private_writer_gets_a_clear_error(tmp_path) -> None:
    """A writer with a sidecar of its own cannot follow a fork (a shared one joins the
    node's sidecar: tests/test_node_sidecar.py)."""
    sw = SidecarWriter(str(tmp_path), share_sidecar=False)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must not touch the parent's sidecar
        try:
            sw.add_scalar("x", 1.0, 0)
            os.write(w, b"no error")
        except MxSidecarError as exc:
            os.write(w, str(exc).encode()[:200])
        os._exit(0)
    os.waitpid(pid, 0)
    msg = os.read(r, 300).decode()
    assert "forked" in msg
    sw.add_scalar("x", 1.0, 0)  # the parent goes on
    sw.close()
    assert intact(str(tmp_path)) == {"x": [0]}
