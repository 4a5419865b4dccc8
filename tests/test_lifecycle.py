"""Flush, close, the context manager, interpreter exit, and a killed sidecar."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from conftest import event_files, read_events, sidecar_children, wait_until

from mxsidecar import SidecarError, SidecarWriter, WriterClosed

pytestmark = pytest.mark.timeout(60)


def gone(sw) -> bool:
    """This writer's segment is unlinked (other tests' open writers may keep theirs)."""
    return not os.path.exists(f"/dev/shm/{sw._pipe.arena.name}")


def summary_steps(logdir: str) -> list[int]:
    return [e.step for p in event_files(logdir) for e in read_events(p) if e.HasField("summary")]


def test_flush_makes_everything_visible_without_close(tmp_path) -> None:
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir, flush_secs=3600)  # the deadline never fires in this test
    try:
        for i in range(500):
            sw.add_scalar("x", i, i)
        sw.flush()
        assert summary_steps(logdir) == list(range(500))  # strict: every record whole
        sw.add_scalar("x", 500, 500)
        sw.flush()
        assert summary_steps(logdir)[-1] == 500
    finally:
        sw.close()


def test_flush_secs_deadline_writes_without_flush(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir, flush_secs=0.2) as sw:
        sw.add_scalar("x", 1, 1)
        assert wait_until(lambda: summary_steps(logdir) == [1], 10)


def test_close_is_idempotent_and_final(tmp_path) -> None:
    sw = SidecarWriter(str(tmp_path))
    sw.add_scalar("x", 1, 1)
    pid = sw.stats()["sidecar_pid"]
    sw.close()
    sw.close()
    assert summary_steps(str(tmp_path)) == [1]
    assert gone(sw)
    with pytest.raises(OSError):
        os.kill(pid, 0)  # reaped, not a zombie
    with pytest.raises(WriterClosed):
        sw.add_scalar("x", 2, 2)
    with pytest.raises(WriterClosed):
        sw.flush()


def test_exception_inside_with_block_still_closes(tmp_path) -> None:
    with pytest.raises(ZeroDivisionError):
        with SidecarWriter(str(tmp_path)) as sw:
            pid = sw.stats()["sidecar_pid"]
            sw.add_scalar("x", 1, 1)
            raise ZeroDivisionError("inside the block")
    assert summary_steps(str(tmp_path)) == [1]
    assert gone(sw) and pid not in {p.pid for p in sidecar_children()}


def test_close_fsyncs(tmp_path, monkeypatch) -> None:
    from mxsidecar.sidecar.output import event_file as events

    synced: list[int] = []
    monkeypatch.setattr(events.os, "fsync", lambda fd: synced.append(fd))
    f = events.EventFile(str(tmp_path), wall_time=1.0, pid=1, index=0)
    f.append(b"x")
    f.close()
    assert len(synced) == 1


def test_drops_are_warned_once_at_close(tmp_path, monkeypatch) -> None:
    """on_full='drop' is not silent: stats() counts per kind and tag, and close() warns
    once with the total.  A slow sidecar (failure injection: 1 s on one item) holds
    the only queue slot, so every item logged meanwhile is dropped, deterministically."""
    import json
    import warnings

    from mxsidecar.sidecar.faults import ENV

    monkeypatch.setenv(ENV, json.dumps([{"at": "receive", "tag": "slow", "action": "sleep", "seconds": 1.0}]))
    sw = SidecarWriter(str(tmp_path), max_queue=1, on_full="drop")
    sw.add_scalar("slow", 0.0, 0)
    for i in range(5):
        sw.add_scalar("x", float(i), i)
    sw.add_text("t", "dropped too", 0)
    stats = sw.stats()
    assert stats["dropped"] == {"scalar": 5, "text": 1}
    assert stats["dropped_by_tag"] == {"scalar/x": 5, "text/t": 1}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sw.close()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "6 items dropped (on_full='drop')" in messages[0]
    assert summary_steps(str(tmp_path)) == [0]


def test_writer_left_open_is_closed_at_exit(tmp_path) -> None:
    script = textwrap.dedent(
        f"""
        from mxsidecar import SidecarWriter
        sw = SidecarWriter({str(tmp_path)!r}, flush_secs=3600)
        for i in range(1000):
            sw.add_scalar("x", i, i)
        # no close(), no flush(): the atexit hook must write all of it
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, cwd=os.getcwd())
    assert summary_steps(str(tmp_path)) == list(range(1000))


def test_killed_sidecar_is_one_explained_error(tmp_path) -> None:
    sw = SidecarWriter(str(tmp_path))
    sw.add_scalar("x", 1, 1)
    sw.flush()
    pid = sw.stats()["sidecar_pid"]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(SidecarError, match="SIGKILL") as info:
        assert wait_until(lambda: sw.stats()["last_error"] is not None, 10)
        sw.add_scalar("x", 2, 2)
    assert info.value.returncode == -signal.SIGKILL
    with pytest.raises(SidecarError):  # sticky
        sw.flush()
    sw.close()  # already raised: close cleans up quietly
    assert gone(sw)
    assert summary_steps(str(tmp_path)) == [1]  # what was flushed survives


def test_killed_sidecar_reported_at_close(tmp_path) -> None:
    sw = SidecarWriter(str(tmp_path))
    os.kill(sw.stats()["sidecar_pid"], signal.SIGKILL)
    with pytest.raises(SidecarError, match="killed by SIGKILL"):
        sw.close()
    sw.close()
    assert gone(sw)


def test_run_directory_blocked_by_a_file_is_refused_in_the_caller(tmp_path) -> None:
    logdir = tmp_path / "run"
    with SidecarWriter(str(logdir)) as sw:
        (logdir / "grp").mkdir()
        (logdir / "grp" / "a").write_text("in the way")
        with pytest.raises(ValueError, match="a file of that name exists"):
            sw.add_scalars("grp", {"a": 1.0})
        sw.add_scalars("grp", {"b": 1.0})
        assert sw._pipe._seq >= 1


def test_sidecar_survives_sigint_to_the_group(tmp_path) -> None:
    """Ctrl-C reaches the whole foreground group; the sidecar must leave the decision to us."""
    with SidecarWriter(str(tmp_path)) as sw:
        os.kill(sw.stats()["sidecar_pid"], signal.SIGINT)
        sw.add_scalar("x", 1, 1)
        sw.flush()
    assert summary_steps(str(tmp_path)) == [1]


def test_completion_thread_failure_is_an_error_not_a_hang(tmp_path, monkeypatch) -> None:
    from mxsidecar import MxSidecarError
    from mxsidecar.training import completion

    real = completion.pack_descriptor

    def exploding(*fields):
        if fields[3] == "boom":
            raise RuntimeError("injected packing failure")
        return real(*fields)

    class ExplodingEntry:  # float scalars travel packed as SCALARS entries: (seq, step, ...)
        size = completion.SCALAR_ENTRY.size

        @staticmethod
        def pack(*fields):
            if fields[1] == 2:
                raise RuntimeError("injected packing failure")
            return real_entry.pack(*fields)

    real_entry = completion.SCALAR_ENTRY
    monkeypatch.setattr(completion, "pack_descriptor", exploding)
    monkeypatch.setattr(completion, "SCALAR_ENTRY", ExplodingEntry)
    sw = SidecarWriter(str(tmp_path))
    sw.add_scalar("ok", 1, 1)
    sw.flush()
    sw.add_scalar("boom", 2, 2)
    with pytest.raises(MxSidecarError, match="completion thread") as info:
        assert wait_until(lambda: sw.stats()["last_error"] is not None, 10)
        sw.add_scalar("ok", 3, 3)
    assert "injected packing failure" in repr(info.value.__cause__)
    sw.close()
    assert summary_steps(str(tmp_path)) == [1]


def test_stats_logged_as_scalars(tmp_path) -> None:
    from conftest import load_multiplexer

    with SidecarWriter(str(tmp_path), stats_secs=0.2) as sw:
        sw.add_scalar("x", 1.0, 0)
        assert wait_until(lambda: sw.stats()["logged_seq"] > 20, 20)
        stats = sw.stats()
    assert {"queued", "in_flight", "dropped", "rejected", "lost", "restarts", "last_error"} <= set(stats)
    assert stats["sidecar"]["cpu_seconds"] > 0 and stats["sidecar"]["rss_bytes"] > 0
    tags = load_multiplexer(str(tmp_path)).PluginRunToTagToContent("scalars")["."]
    assert {"mxsidecar/queued", "mxsidecar/dropped", "mxsidecar/sidecar_rss_mb", "mxsidecar/lost"} <= set(tags)


def test_verbose_close_counts_the_items_logged(tmp_path, capsys) -> None:
    """close() with verbose=True accounts for each value logged with add_* once: FLUSH,
    STATS and CLOSE messages and the purge_step marker are not items (issue 15)."""
    mx = pytest.importorskip("mxnet")
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir, purge_step=0, verbose=True)
    for i in range(7):
        sw.add_scalar("x", float(i), i)
        sw.flush()
        sw.stats()
    sw.add_histogram("h", np.arange(10.0), 0)
    sw.add_text("t", "hello", 0)
    with pytest.warns(RuntimeWarning, match="was not written"):
        sw.add_histogram("all_nan", mx.nd.array([np.nan, np.nan]), 0)  # only the sidecar can refuse it
        sw.flush()
    capsys.readouterr()
    with pytest.warns(RuntimeWarning, match="1 rejected"):
        sw.close()
    assert capsys.readouterr().out == f"mxsidecar: {logdir}: 9 items written, 0 dropped, 1 rejected, 0 lost\n"
    assert len(summary_steps(logdir)) == 9  # what it says it wrote is in the file


def test_verbose_close_accounts_for_dropped_items(tmp_path, capsys) -> None:
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir, max_queue=2, on_full="drop", verbose=True)
    for i in range(300):
        sw.add_scalar("x", float(i), i)
    sw.flush()
    dropped = sw.stats()["dropped"].get("scalar", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the drop warning, if the sidecar kept up with none
        sw.close()
    line = capsys.readouterr().out
    written = int(
        re.fullmatch(
            rf"mxsidecar: {re.escape(logdir)}: (\d+) items written, {dropped} dropped, 0 rejected, 0 lost\n", line
        )[1]
    )
    assert written + dropped == 300
    assert written == len(summary_steps(logdir))


def test_warnings_as_errors_do_not_kill_the_writer(tmp_path) -> None:
    """Under -W error our notices (raised in a background thread) must not look like a dead sidecar."""
    script = textwrap.dedent(
        f"""
        import numpy as np
        from mxsidecar import SidecarWriter
        with SidecarWriter({str(tmp_path)!r}) as sw:
            sw.add_histogram("h", np.array([1.0, np.nan]), 0)
            sw.flush()
            sw.add_scalar("x", 1.0, 1)
            sw.flush()
            assert sw.stats()["last_error"] is None
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok" and "NaN/Inf" in out.stderr


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux-only")
def test_sidecar_yields_the_cpu_to_training(tmp_path) -> None:
    """Invariant 9, checked on the live process: SCHED_IDLE and nice by default,
    affinity when asked, the plain policy when sched_idle=False; stats() says which."""
    import psutil

    base_nice = os.getpriority(os.PRIO_PROCESS, 0)
    with SidecarWriter(str(tmp_path / "a")) as w:
        s = w.stats()
        pid = s["sidecar_pid"]
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        assert psutil.Process(pid).nice() == min(19, base_nice + 10)
        assert s["sidecar"]["scheduling"] == f"idle, nice {min(19, base_nice + 10)}"
    cpu = sorted(psutil.Process().cpu_affinity())[-1]
    with SidecarWriter(str(tmp_path / "b"), sched_idle=False, nice=3, cpu_affinity=[cpu]) as w:
        s = w.stats()
        pid = s["sidecar_pid"]
        assert os.sched_getscheduler(pid) == os.SCHED_OTHER
        assert psutil.Process(pid).nice() == min(19, base_nice + 3)
        assert psutil.Process(pid).cpu_affinity() == [cpu]
        assert s["sidecar"]["scheduling"] == f"normal, nice {min(19, base_nice + 3)}, cpus {cpu}"


@pytest.mark.parametrize("implementation", [None, "python"])
def test_stats_name_the_sidecars_protobuf(tmp_path, monkeypatch, implementation) -> None:
    """The sidecar is the only process that encodes, so stats() says which protobuf it
    runs; the sidecar inherits PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION like any child."""
    import google.protobuf
    from google.protobuf.internal import api_implementation

    if implementation is not None:
        monkeypatch.setenv("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", implementation)
    with SidecarWriter(str(tmp_path)) as w:
        w.add_scalar("x", 1.0, 0)
        got = w.stats()["sidecar"]["protobuf"]
    expected = implementation or api_implementation.Type()
    assert got == {"version": google.protobuf.__version__, "implementation": expected}


# -- export_scalars / clear_scalar_dict: every file this writer wrote (issue 15) ---------


def exported(sw: SidecarWriter, path: str) -> dict[str, list[int]]:
    """export_scalars' JSON: key -> steps, each value checked against its step."""
    sw.export_scalars(path)
    with open(path) as f:
        out = json.load(f)
    for values in out.values():
        assert all(value == float(step) for _wall, step, value in values)
    return {key: [step for _wall, step, _value in values] for key, values in out.items()}


def scalar_steps_read_by_tensorboard(logdir: str) -> dict[str, list[int]]:
    """The same keys as export_scalars, from TensorBoard's own loader."""
    from conftest import load_multiplexer, tensor_values

    mux = load_multiplexer(logdir)
    out = {}
    for run, tags in mux.PluginRunToTagToContent("scalars").items():
        for tag in tags:
            key = os.path.join(logdir, tag if run == "." else run)
            out[key] = sorted(step for step, _ in tensor_values(mux, run, tag))
    return out


def test_export_after_close(tmp_path) -> None:
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir)
    for i in range(5):
        sw.add_scalar("x", float(i), i)
        sw.add_scalars("g", {"a": float(i), "b": float(i)}, i)
    sw.close()
    got = exported(sw, str(tmp_path / "s.json"))
    assert got == scalar_steps_read_by_tensorboard(logdir)
    assert got[os.path.join(logdir, "x")] == list(range(5)) and len(got) == 3  # x, g/a, g/b
    assert sorted(sw.stats()["files"]) == event_files(logdir)


def test_export_covers_the_files_of_every_reopen(tmp_path) -> None:
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir)
    sw.add_scalar("x", 0.0, 0)
    sw.close()
    sw.reopen()
    sw.add_scalar("x", 1.0, 1)
    sw.add_scalars("g", {"a": 1.0}, 1)
    sw.close()
    sw.reopen()
    sw.add_scalar("x", 2.0, 2)
    assert exported(sw, str(tmp_path / "s.json")) == {
        os.path.join(logdir, "x"): [0, 1, 2],
        os.path.join(logdir, "g", "a"): [1],
    }
    assert sorted(sw.stats()["files"]) == event_files(logdir) and len(event_files(logdir)) == 4
    sw.close()


def test_export_covers_the_files_of_a_restarted_sidecar(tmp_path) -> None:
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir, on_error="restart")
    for i in range(3):
        sw.add_scalar("x", float(i), i)
    sw.flush()
    with pytest.warns(RuntimeWarning, match="restarting"):
        os.kill(sw.stats()["sidecar_pid"], signal.SIGKILL)
        assert wait_until(lambda: sw.stats()["restarts"] == 1)
    for i in range(3, 6):
        sw.add_scalar("x", float(i), i)
    assert exported(sw, str(tmp_path / "s.json")) == {os.path.join(logdir, "x"): list(range(6))}
    assert sorted(sw.stats()["files"]) == event_files(logdir) and len(event_files(logdir)) == 2
    sw.close()


def test_clear_scalar_dict_across_close_and_reopen(tmp_path) -> None:
    logdir = str(tmp_path)
    key = os.path.join(logdir, "x")
    path = str(tmp_path / "s.json")
    sw = SidecarWriter(logdir)
    sw.add_scalar("x", 0.0, 0)
    sw.add_scalar("x", 1.0, 1)
    sw.close()
    assert exported(sw, path) == {key: [0, 1]}
    sw.reopen()
    sw.add_scalar("x", 2.0, 2)
    sw.clear_scalar_dict()  # both pipelines' files
    sw.add_scalar("x", 3.0, 3)
    assert exported(sw, path) == {key: [3]}
    sw.close()
    assert exported(sw, path) == {key: [3]}
    sw.clear_scalar_dict()  # after close too
    assert exported(sw, path) == {}
    sw.reopen()
    sw.add_scalar("x", 4.0, 4)
    assert exported(sw, path) == {key: [4]}
    sw.close()
