"""A URL logdir: the constructor's checks, and the remote back end over fsspec's memory://.

The back end is driven in this process (memory:// is per process, so a sidecar's
uploads could not be seen from here); tests/test_remote_s3.py runs the whole writer
against a real S3 endpoint.
"""

from __future__ import annotations

import os
import sys

import pytest
from conftest import read_events

from mxsidecar import SidecarWriter
from mxsidecar.formats.records import iter_records

fsspec = pytest.importorskip("fsspec")
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def memfs():
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    yield fs
    fs.store.clear()


# -- the constructor -------------------------------------------------------------------


@pytest.mark.parametrize(
    "logdir,message",
    [
        ("nosuchscheme://bucket/run", "unknown URL scheme 'nosuchscheme'"),
        ("s3://", "names no bucket"),
        ("s3:///run", "names no bucket"),
    ],
)
def test_a_url_that_cannot_be_written_is_a_valueerror_and_no_local_directory(tmp_path, monkeypatch, logdir, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message):
        SidecarWriter(logdir)
    assert os.listdir(tmp_path) == []  # never a directory named 's3:' or 'nosuchscheme:'


def test_a_missing_fsspec_names_the_extra_to_install(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec -> ImportError
    with pytest.raises(ValueError, match=r"pip install 'mxsidecar\[s3\]'"):
        SidecarWriter("s3://bucket/run")
    with pytest.raises(ValueError, match=r"pip install 'mxsidecar\[gcs\]'"):
        SidecarWriter("gs://bucket/run")
    assert os.listdir(tmp_path) == []


def test_a_missing_file_system_package_names_the_extra(tmp_path, monkeypatch):
    registry = sys.modules["fsspec.registry"]  # the module: fsspec.registry is a mapping
    monkeypatch.chdir(tmp_path)
    # What fsspec does when gcsfs is not installed, whether or not it is here.
    monkeypatch.setitem(registry.known_implementations, "gs", {"class": "nonexistent_gcsfs.GCSFileSystem"})
    monkeypatch.delitem(registry._registry, "gs", raising=False)
    with pytest.raises(ValueError, match=r"pip install 'mxsidecar\[gcs\]'"):
        SidecarWriter("gs://bucket/run")
    assert os.listdir(tmp_path) == []


def test_storage_options_are_checked(tmp_path):
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        SidecarWriter("memory://bkt/run", storage_options=[("a", 1)])
    with pytest.raises(TypeError, match="JSON-serializable"):
        SidecarWriter("memory://bkt/run", storage_options={"session": object()})
    with pytest.raises(ValueError, match="storage_options and spool_dir are for a URL logdir"):
        SidecarWriter(str(tmp_path), storage_options={})


def test_a_file_url_is_the_local_directory(tmp_path):
    with SidecarWriter(f"file://{tmp_path}/run") as sw:
        sw.add_scalar("x", 1.0, 0)
    assert sw.logdir == str(tmp_path / "run")
    assert len(os.listdir(tmp_path / "run")) == 1


def test_a_memory_url_writes_the_spool_and_uploads_it(tmp_path):
    spool = tmp_path / "spool"
    with SidecarWriter("memory://bkt/run/", spool_dir=str(spool), flush_secs=60) as sw:
        assert sw.logdir == "memory://bkt/run"
        for i in range(5):
            sw.add_scalar("x", float(i), i)
        sw.flush()  # seals the file and waits for its upload
        up = sw.stats()["sidecar"]["uploads"]
        assert up["pending"] == [] and up["uploaded"] == 1 and up["url"] == "memory://bkt/run"
        assert up["bytes_uploaded"] == os.path.getsize(sw.stats()["files"][0])
    (name,) = [n for n in os.listdir(spool) if "tfevents" in n]
    assert name.endswith(".000000")  # the roll counter: names sort in roll order
    assert [e.summary.value[0].tensor.float_val[0] for e in read_events(str(spool / name))[1:]] == [0, 1, 2, 3, 4]


# -- the back end, in this process -----------------------------------------------------


def _backend(spool, opened):
    from mxsidecar.sidecar.output.remote import RemoteDirectory

    return RemoteDirectory(str(spool), "memory://bkt/logs", {}, opened.append, (7, 3))


def _records(data: bytes):
    from tensorboard.compat.proto import event_pb2

    return [event_pb2.Event.FromString(r.data) for r in iter_records(data)]


def test_rolled_files_are_each_a_tensorboard_file_uploaded_in_name_order(tmp_path, memfs):
    from mxsidecar.sidecar.encoders.scalar import event_bytes

    opened: list[str] = []
    out = _backend(tmp_path, opened)
    f = out.open_event_file("", wall_time=1.0e9, pid=7, index=3, suffix="_z")
    for roll in range(4):
        for step in range(3):
            first = "loss" not in f.tags_with_metadata
            f.tags_with_metadata.add("loss")
            f.append(event_bytes(1.0e9, roll * 3 + step, "loss", float(step), first))
        f.flush()
        out.tick([f])  # a flush_secs tick: sealed and queued
    out.tick([f])  # nothing new: no empty file
    f.close()
    out.close()
    names = sorted(p.split("/")[-1] for p in memfs.find("/bkt/logs"))
    assert len(names) == 4 and len(opened) == 3  # the first file's Opened is the loop's
    # The user's suffix '_z' sorts after '.', so the roll counter must come before it.
    assert [n.split(".")[-1] for n in names] == ["000000_z", "000001_z", "000002_z", "000003_z"]
    steps = []
    for n in names:
        events = _records(memfs.cat(f"/bkt/logs/{n}"))
        assert events[0].file_version == "brain.Event:2"  # each file valid on its own
        assert events[1].summary.value[0].metadata.plugin_data.plugin_name == "scalars"
        assert not any(e.HasField("session_log") for e in events)
        steps += [e.step for e in events[1:]]
        assert memfs.cat(f"/bkt/logs/{n}") == (tmp_path / n).read_bytes()  # the spool keeps its copy
    assert steps == list(range(12))
    st = out.stats()
    assert st["uploaded"] == 4 and st["bytes_sent"] == st["bytes_uploaded"] == sum(
        (tmp_path / n).stat().st_size for n in names
    )


def test_a_file_reaching_the_size_limit_is_sealed(tmp_path, memfs, monkeypatch):
    from mxsidecar.sidecar.encoders.scalar import event_bytes
    from mxsidecar.sidecar.output import remote

    monkeypatch.setattr(remote, "ROLL_BYTES", 1000)
    out = _backend(tmp_path, [])
    f = out.open_event_file("", wall_time=1.0e9, pid=7, index=0)
    for step in range(100):
        f.append(event_bytes(1.0e9, step, "loss", 1.0, step == 0))
    out.uploader.wait(10)
    sealed = memfs.find("/bkt/logs")
    assert len(sealed) >= 4  # ~40 bytes a record: a new file every ~25 records, without any tick
    assert all(len(memfs.cat(p)) <= 1000 + 64 for p in sealed)
    f.close()
    out.close()


def test_projector_assets_are_uploaded_before_the_config(tmp_path, memfs, monkeypatch):
    import numpy as np

    from mxsidecar.sidecar.output import projector, uploader
    from mxsidecar.wire.descriptors import Descriptor, Kind, Op

    monkeypatch.setattr(uploader, "BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(uploader, "BACKOFF_MAX", 0.02)
    out = _backend(tmp_path, [])
    flaky = out.uploader.fs = FlakyFS(memfs, down=True)  # every file waits in the queue: order is the queue's
    desc = Descriptor(Op.ITEM, 1, Kind.EMBEDDING, "emb", 5, 1.0, options={"tensor_format": "tsv"}, text='["a", "b"]')
    projector.write_embedding(out, "", desc, {"mat": np.eye(2, dtype=np.float32)})
    flaky.down = False
    out.close()
    order = [c.split("/bkt/logs/")[-1] for c in flaky.done]
    assert order[-1] == "projector_config.pbtxt" and len(order) >= 3, order
    assert memfs.exists("/bkt/logs/projector_config.pbtxt")


def test_publish_returns_once_the_files_are_uploaded(tmp_path, memfs, monkeypatch):
    """flush(): what was logged before it is in the store when it returns."""
    import threading

    from mxsidecar.sidecar.encoders.scalar import event_bytes
    from mxsidecar.sidecar.output import uploader

    monkeypatch.setattr(uploader, "BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(uploader, "BACKOFF_MAX", 0.02)
    out = _backend(tmp_path, [])
    flaky = out.uploader.fs = FlakyFS(memfs, down=True)
    f = out.open_event_file("", wall_time=1.0e9, pid=7, index=0)
    f.append(event_bytes(1.0e9, 0, "loss", 1.0, True))
    threading.Timer(0.3, lambda: setattr(flaky, "down", False)).start()
    out.publish([f])
    assert [p.split("/")[-1] for p in memfs.find("/bkt/logs")] == [os.path.basename(f.path)]
    f.close()
    out.close()


class FlakyFS:
    """An fsspec file system whose puts fail while ``down`` (the endpoint unreachable)."""

    def __init__(self, fs, down: bool) -> None:
        self.fs = fs
        self.down = down
        self.calls: list[str] = []  # every attempt
        self.done: list[str] = []  # the uploads that succeeded, in order

    def put_file(self, lpath: str, rpath: str, **kw) -> None:
        self.calls.append(rpath)
        if self.down:
            raise ConnectionError("endpoint down")
        self.fs.put_file(lpath, rpath)
        self.done.append(rpath)


def test_uploads_retry_in_order_while_the_store_is_down(tmp_path, memfs, monkeypatch):
    from mxsidecar.sidecar.output import uploader

    monkeypatch.setattr(uploader, "BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(uploader, "BACKOFF_MAX", 0.02)
    flaky = FlakyFS(memfs, down=True)
    up = uploader.Uploader(flaky, str(tmp_path), "/bkt/logs", "memory://bkt/logs")
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode() * 10)
        up.put(str(tmp_path / name))
    assert not up.wait(0.3)
    st = up.stats()
    assert st["pending"] == ["a", "b", "c"] and st["failed_attempts"] >= 3 and "endpoint down" in st["last_error"]
    assert set(flaky.calls) == {"/bkt/logs/a"}  # the first file blocks the rest: never out of order
    flaky.down = False
    assert up.wait(10)
    up.close(1)
    assert flaky.done == ["/bkt/logs/a", "/bkt/logs/b", "/bkt/logs/c"]
    assert memfs.cat("/bkt/logs/c") == b"c" * 10
    st = up.stats()
    assert st["uploaded"] == 3 and st["bytes_uploaded"] == 30 and st["bytes_sent"] > 30


def test_close_names_what_was_not_uploaded_and_where_it_is(tmp_path, memfs, monkeypatch):
    from mxsidecar.sidecar.output import uploader

    monkeypatch.setattr(uploader, "BACKOFF_FIRST", 0.01)
    up = uploader.Uploader(FlakyFS(memfs, down=True), str(tmp_path), "/bkt/logs", "memory://bkt/logs")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "events.out.tfevents.1").write_bytes(b"x")
    up.put(str(tmp_path / "run" / "events.out.tfevents.1"))
    with pytest.raises(uploader.UploadError) as err:
        up.close(0.2)
    msg = str(err.value)
    assert "1 files were not uploaded to memory://bkt/logs" in msg and "endpoint down" in msg
    assert f"run/events.out.tfevents.1; they are kept in the spool {tmp_path}" in msg


# -- a spool left by a killed sidecar ---------------------------------------------------


def _leave_spool(tmp_path, memfs, pid: int, index: int, kill_after_seal: bool):
    """A sidecar's back end killed mid-run: one file sealed (uploaded or not), one being written, torn."""
    from mxsidecar.sidecar.encoders.scalar import event_bytes
    from mxsidecar.sidecar.output import spool as spool_mod
    from mxsidecar.sidecar.output.remote import RemoteDirectory

    out = RemoteDirectory(str(tmp_path), "memory://bkt/logs", {}, lambda p: None, (pid, index))
    out.uploader.fs = FlakyFS(memfs, down=kill_after_seal)  # the store unreachable: the sealed file stays
    f = out.open_event_file("", wall_time=1.0e9, pid=pid, index=index)
    for step in range(10):
        f.append(event_bytes(1.0e9, step, "loss", float(step), step == 0))
    out.tick([f])
    for step in range(10, 15):
        f.append(event_bytes(1.0e9, step, "loss", float(step), False))
    f.flush()
    if not kill_after_seal:
        out.uploader.wait(10)
    current = f.path
    with open(current, "ab") as fh:
        fh.write(b"\x20\x00\x00\x00torn")  # half a record: the kill came mid-write
    # SIGKILL: nothing more runs; the kernel drops the lock with the process (here, by hand).
    out.uploader._stop = True
    os.close(out._live._fd)
    out._live._fd = -1
    return current, spool_mod


def test_the_next_writer_uploads_what_a_killed_one_left_torn_tail_cut(tmp_path, memfs):
    from mxsidecar.sidecar.output.remote import RemoteDirectory

    current, _ = _leave_spool(tmp_path, memfs, pid=11, index=0, kill_after_seal=True)
    assert memfs.find("/bkt/logs") == []
    out = RemoteDirectory(str(tmp_path), "memory://bkt/logs", {}, lambda p: None, (12, 0))
    assert len(out.recovered) == 2 and out.recovered[-1] == current
    out.close()
    names = sorted(memfs.find("/bkt/logs"))
    steps = [e.step for n in names for e in _records(memfs.cat(n))[1:]]
    assert steps == list(range(15))  # both files, in name order, the torn record cut
    assert memfs.cat(names[-1]) == open(current, "rb").read()


def test_files_already_uploaded_or_of_a_live_writer_are_left_alone(tmp_path, memfs):
    from mxsidecar.sidecar.output.remote import RemoteDirectory

    current, spool_mod = _leave_spool(tmp_path, memfs, pid=21, index=0, kill_after_seal=False)
    (first,) = memfs.find("/bkt/logs")
    live = spool_mod.LiveLock(str(tmp_path), 22, 0)  # another writer, alive, mid-file
    other = tmp_path / os.path.basename(current).replace(".21.000000.", ".22.000000.")
    other.write_bytes(open(current, "rb").read())
    out = RemoteDirectory(str(tmp_path), "memory://bkt/logs", {}, lambda p: None, (23, 0))
    assert out.recovered == [current]  # not the uploaded one, not the live writer's
    out.close()
    live.release()
    assert sorted(memfs.find("/bkt/logs")) == sorted([first, "/bkt/logs/" + os.path.basename(current)])


def test_python_m_mxsidecar_upload(tmp_path, memfs, capsys):
    from mxsidecar.__main__ import main

    _leave_spool(tmp_path, memfs, pid=31, index=0, kill_after_seal=True)
    assert main(["upload", str(tmp_path)]) == 0
    assert "2 files uploaded" in capsys.readouterr().out
    assert len(memfs.find("/bkt/logs")) == 2
    assert main(["upload", str(tmp_path / "nothing")]) == 2
