"""close(): durable before it returns, prompt without trading that away, nothing left.

close() used to cost a fixed ~70 ms (perf/bench_close.py): the sidecar's interpreter
teardown after its files were closed, and ``Popen.wait(timeout)``'s polling sleeps.
The sidecar now ends with ``os._exit`` once everything is written, and the trainer
waits for its exit on a pidfd.  These tests pin the mechanisms and what must survive
them, never the time taken.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import event_files, read_events

from mxsidecar import SidecarWriter
from mxsidecar.training import completion
from mxsidecar.training.supervisor import reap
from mxsidecar.wire.descriptors import Op

pytestmark = pytest.mark.timeout(60)

# Loaded by the sidecar's interpreter at start (it is first on the PYTHONPATH the
# sidecar inherits): logs the path behind every fd it fsyncs, so the test can check
# from outside that the sidecar itself made each event file durable.
_SITECUSTOMIZE = textwrap.dedent(
    """
    import os
    _log = os.environ.get("MXSIDECAR_TEST_FSYNC_LOG")
    if _log:
        _fsync = os.fsync

        def fsync(fd):
            _fsync(fd)
            with open(_log, "a") as f:
                f.write(os.readlink(f"/proc/self/fd/{fd}") + "\\n")

        os.fsync = fsync
    """
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name an fd's file")
def test_close_returns_after_the_sidecar_fsynced_every_event_file(tmp_path, monkeypatch) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    log = tmp_path / "fsynced.txt"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("MXSIDECAR_TEST_FSYNC_LOG", str(log))
    logdir = tmp_path / "logs"
    sw = SidecarWriter(str(logdir), flush_secs=3600)  # no deadline fsync: only close() makes them
    sw.add_scalar("loss", 1.0, 0)
    sw.add_scalars("lr", {"a": 0.1, "b": 0.2}, 0)  # two more runs, two more files
    sw.close()
    files = event_files(str(logdir))
    assert len(files) == 3
    fsynced = set(log.read_text().split()) if log.exists() else set()
    assert {os.path.realpath(p) for p in files} <= fsynced
    assert sw._pipe.supervisor.proc.returncode == 0  # a clean exit, not a kill after a timeout
    assert sum(e.HasField("summary") for p in files for e in read_events(p)) == 3


def test_sidecar_exit_skips_teardown_but_keeps_what_it_printed(tmp_path) -> None:
    """The sidecar ends with os._exit: output it wrote before must still reach us, and
    its exit status must still be main()'s."""
    script = textwrap.dedent(
        """
        import sys
        from mxsidecar.sidecar import process
        def main(argv=None):
            sys.stdout.write("partial line, no newline")
            return 7
        process.main = main
        import runpy
        runpy.run_module("mxsidecar.sidecar", run_name="__main__")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe: block-buffered
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 7
    assert out.stdout == "partial line, no newline"


class _NoPolling(subprocess.Popen):  # type: ignore[type-arg]
    """A Popen whose wait refuses a timeout: Popen.wait(timeout) sleeps in a loop."""

    def wait(self, timeout=None):
        assert timeout is None, "reap() polled the process with Popen.wait(timeout)"
        return super().wait()


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd here: reap() polls, by design")
def test_reap_waits_on_the_exit_itself_not_a_polling_loop() -> None:
    proc = _NoPolling([sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(5)"])
    assert reap(proc, 30.0) == 5


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_reap_kills_a_process_that_does_not_exit(monkeypatch, pidfd) -> None:
    if pidfd and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd here")
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert reap(proc, 0.5) == -signal.SIGKILL


def test_control_descriptors_are_sent_without_the_batching_delay(monkeypatch) -> None:
    """The completion thread waits BATCH_DELAY after an item to gather a burst; a FLUSH
    or CLOSE has a caller waiting and nothing to gather."""
    monkeypatch.setattr(completion, "BATCH_DELAY", 3600.0)
    sent: list[int] = []
    failures: list[BaseException] = []
    # send(payloads, ..., last_seq): the last argument is the batch's last seq
    thread = completion.CompletionThread(lambda payloads, *rest: sent.append(rest[-1]), failures.append)
    thread.start()
    thread.put((Op.CLOSE, 1, 0, "", 0, 0.0, "", 0.0, "", 0, 0, "", (), None, None))
    thread.put(completion.STOP)
    thread.join(30)
    assert not thread.is_alive(), "the completion thread slept before sending a control descriptor"
    assert sent == [1] and not failures


def test_close_leaves_no_process_and_no_segment(tmp_path) -> None:
    sw = SidecarWriter(str(tmp_path))
    sw.add_scalar("x", 1.0, 0)
    sw.flush()
    pid = sw._pipe.supervisor.pid
    sw.close()
    assert not os.path.exists(f"/dev/shm/{sw._pipe.arena.name}")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped, not a zombie


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux-only")
def test_close_lifts_sched_idle_where_permitted(tmp_path, monkeypatch) -> None:
    """Once the trainer waits in close(), a SCHED_IDLE sidecar would wait behind every
    other runnable thread on the machine: close() asks for SCHED_OTHER (nice stays)."""
    calls: list[tuple[int, int]] = []
    real = os.sched_setscheduler

    def recording(pid, policy, param):
        calls.append((pid, policy))
        return real(pid, policy, param)

    sw = SidecarWriter(str(tmp_path))
    sw.add_scalar("x", 1.0, 0)
    sw.flush()
    pid = sw._pipe.supervisor.pid
    assert os.sched_getscheduler(pid) == os.SCHED_IDLE
    monkeypatch.setattr(os, "sched_setscheduler", recording)
    sw.close()
    assert calls == [(pid, os.SCHED_OTHER)]
    assert [e.step for p in event_files(str(tmp_path)) for e in read_events(p) if e.HasField("summary")] == [0]


def _may_leave_sched_idle(pid: int) -> bool:
    """The kernel's rule (sched_setscheduler(2)): CAP_SYS_NICE, or a nice value within
    RLIMIT_NICE (``20 - rlim_cur`` at best)."""
    import resource

    with open("/proc/self/status") as f:
        caps = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    cap_sys_nice = 23
    nice = os.getpriority(os.PRIO_PROCESS, pid)
    return bool(caps >> cap_sys_nice & 1) or 20 - nice <= resource.getrlimit(resource.RLIMIT_NICE)[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/status") or not hasattr(os, "SCHED_IDLE"), reason="Linux only")
def test_lifting_sched_idle_takes_effect_or_is_refused_quietly(tmp_path, monkeypatch) -> None:
    sw = SidecarWriter(str(tmp_path))
    sw.flush()  # the sidecar is up: it chose SCHED_IDLE first thing
    pid = sw._pipe.supervisor.pid
    assert os.sched_getscheduler(pid) == os.SCHED_IDLE
    sw._pipe.supervisor._hurry()
    expected = os.SCHED_OTHER if _may_leave_sched_idle(pid) else os.SCHED_IDLE
    assert os.sched_getscheduler(pid) == expected

    def refused(pid, policy, param):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refused)  # an unprivileged user's close()
    sw.add_scalar("x", 1.0, 0)
    sw.close()
    assert [e.step for p in event_files(str(tmp_path)) for e in read_events(p) if e.HasField("summary")] == [0]
