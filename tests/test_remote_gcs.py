"""A ``gs://`` logdir against a GCS emulator: gcp-storage-emulator's server on 127.0.0.1,
written by the sidecar through gcsfs and read back with TensorBoard's own loader from the
``gs://`` URL (its Python loader reads gs:// through fsspec, so gcsfs), as a user's
TensorBoard would.  Both find the emulator through ``STORAGE_EMULATOR_HOST``.  Skipped
where gcsfs or the emulator is not installed (tox's py311-pb7 has them: the ``gcstest`` extra).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid

import pytest
from conftest import load_multiplexer, tensor_values, wait_until

from mxsidecar import SidecarError, SidecarWriter

# gcsfs reads this once, when it is imported (here, or by fsspec in TensorBoard's loader):
# else its GCSFileSystem probes each bucket for hierarchical namespaces over gRPC, which the
# emulator does not answer, and waits a minute for that on every new instance.  The sidecar
# inherits it.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
gcsfs = pytest.importorskip("gcsfs")
emulator = pytest.importorskip("gcp_storage_emulator.server")
pytestmark = pytest.mark.timeout(180)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Endpoint:
    """The emulator on a fixed port, its buckets and objects on disk: stop() and start()
    keep both (a restarted server reads the same directory), as a GCS outage would."""

    def __init__(self, data_dir: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        self.server = None

    def start(self) -> None:
        self.server = emulator.create_server("127.0.0.1", self.port, in_memory=False, data_dir=self.data_dir)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def _multipart_keeping_every_byte(read_data):
    """The emulator's body parser, except for gcsfs's two-part (metadata, content) uploads.

    gcsfs ends the content with ``\\n--boundary--``; the emulator parses the body with
    Python's email module, which reads a ``\\r`` ending the content as part of a CRLF
    before the boundary and drops it: an object whose last byte is 0x0D (one event file
    in 256, where a record's CRC ends in it) was stored one byte short. GCS keeps every
    byte, so the test splits the parts itself, taking off exactly the line break the
    sender put before each boundary, and judges our upload, not that bug."""

    def read(request_handler, query):
        content_type = request_handler.headers.get("Content-Type") or ""
        if not content_type.startswith("multipart/related") or "boundary=" not in content_type:
            return read_data(request_handler, query)
        raw = emulator._decode_raw_data(emulator._read_raw_data(request_handler), request_handler)
        boundary = content_type.split("boundary=", 1)[1].split(";")[0].strip().strip('"').encode()
        parts = raw.split(b"--" + boundary)[1:-1]  # the preamble and the closing '--' left out
        eol = b"\r\n" if parts[0].startswith(b"\r\n") else b"\n"  # the sender's line break

        def split(part: bytes) -> tuple[list[bytes], bytes]:
            head, _, body = part[len(eol) :].partition(eol + eol)
            return head.split(eol), body[: -len(eol)]  # the line break before the next boundary

        meta = split(parts[0])[1]
        head, content = split(parts[1])
        types = [h.split(b":", 1)[1].strip() for h in head if h.lower().startswith(b"content-type:")]
        return {
            "meta": json.loads(meta),
            "content": content,
            "content-type": types[0].decode() if types else "application/octet-stream",
        }

    return read


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    patch = pytest.MonkeyPatch()
    patch.setattr(emulator, "_read_data", _multipart_keeping_every_byte(emulator._read_data))
    ep = Endpoint(str(tmp_path_factory.mktemp("gcs")))
    ep.start()
    yield ep
    ep.stop()
    patch.undo()


def test_the_emulator_keeps_an_objects_every_byte(bucket):
    # What the patch above is for: the content a test compares must be what was uploaded.
    fs = _fs()
    for data in (b"abc\r", b"\r", b"abc\r\n", b"\x00\r\n--x\r", b""):
        fs.pipe_file(f"{bucket}/x", data)
        assert _fs().cat_file(f"{bucket}/x") == data


def _fs():
    # A new instance each time (fsspec caches instances, and gcsfs its listings): what the
    # test reads is what the emulator has now.
    return gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)


@pytest.fixture
def bucket(endpoint, monkeypatch):
    """A new bucket; the environment a user's TensorBoard and the sidecar both need."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint.url)  # gcsfs, here and in the sidecar
    # Imported elsewhere before this module set the variable, gcsfs would wait on its probe.
    assert gcsfs.GCSFileSystem is gcsfs.core.GCSFileSystem, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT was read as true"
    if endpoint.server is None:
        endpoint.start()
    name = "bkt-" + uuid.uuid4().hex[:12]
    _fs().mkdir(name)
    yield name
    if endpoint.server is None:
        endpoint.start()  # a test that stopped it and failed


def _objects(bucket: str, prefix: str) -> dict[str, bytes]:
    fs = _fs()
    return {path[len(bucket) + 1 :]: fs.cat_file(path) for path in fs.find(f"{bucket}/{prefix}")}


def test_a_missing_bucket_is_a_valueerror_in_the_constructor(bucket, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="bucket or directory does not exist"):
        SidecarWriter(f"gs://{bucket}-missing/run")
    assert os.listdir(tmp_path) == []  # neither a spool nor a local 'gs:' directory


def test_many_rolled_files_read_back_complete_and_in_order(bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", "4096")  # a new file every ~100 scalars
    url = f"gs://{bucket}/logs/run1"
    spool = tmp_path / "spool"
    with SidecarWriter(url, spool_dir=str(spool), flush_secs=0.2) as sw:
        for i in range(3000):
            sw.add_scalar("loss", float(i), i)
            if i % 500 == 0:
                sw.add_histogram("w", [float(i), 1.0, 2.0], i)
                sw.add_scalars("pair", {"a": float(i), "b": -float(i)}, i)
        sw.flush()
        up = sw.stats()["sidecar"]["uploads"]
        assert up["pending"] == [] and up["failed_attempts"] == 0
    sw.export_scalars(str(tmp_path / "scalars.json"))
    exported = json.loads((tmp_path / "scalars.json").read_text())
    assert [s for _, s, _ in exported[f"{url}/loss"]] == list(range(3000))
    objects = _objects(bucket, "logs/run1/")
    top = sorted(k for k in objects if k.count("/") == 2)
    assert len(top) >= 20
    for key, data in objects.items():  # every object is the spool's file, uploaded once, whole
        assert (spool / key[len("logs/run1/") :]).read_bytes() == data
    # TensorBoard's own loader, from the URL: every value, in order, across every file.
    mux = load_multiplexer(url)
    assert sorted(mux.Runs()) == [".", "pair/a", "pair/b"]
    values = tensor_values(mux, ".", "loss")
    assert [s for s, _ in values] == list(range(3000))
    assert [float(v) for _, v in values] == [float(i) for i in range(3000)]
    assert len(tensor_values(mux, ".", "w")) == 6
    assert [float(v) for _, v in tensor_values(mux, "pair/b", "pair")] == [-500.0 * k for k in range(6)]


def test_a_value_is_visible_remotely_within_flush_secs_without_flush_or_close(bucket, tmp_path):
    url = f"gs://{bucket}/run"
    with SidecarWriter(url, spool_dir=str(tmp_path / "spool"), flush_secs=0.5) as sw:
        sw.add_scalar("x", 42.0, 7)

        def seen() -> bool:
            _fs().invalidate_cache()  # the loader's gcsfs instance is fsspec's cached one
            return "x" in load_multiplexer(url).Runs().get(".", {}).get("tensors", [])

        assert wait_until(seen, timeout=30, interval=0.2)
        assert [(s, float(v)) for s, v in tensor_values(load_multiplexer(url), ".", "x")] == [(7, 42.0)]


def test_the_endpoint_stopped_mid_run_and_restarted_loses_nothing(bucket, endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", "4096")
    # gcsfs retries a refused connection itself, 6 times over ~30 s, before one put fails to
    # the uploader: close() waits long enough for the put under way to go through.
    monkeypatch.setenv("MXSIDECAR_UPLOAD_WAIT_SECS", "120")
    url = f"gs://{bucket}/run"
    with SidecarWriter(url, spool_dir=str(tmp_path / "spool"), flush_secs=0.2) as sw:
        for i in range(500):
            sw.add_scalar("loss", float(i), i)
        sw.flush()
        endpoint.stop()
        for i in range(500, 1500):
            sw.add_scalar("loss", float(i), i)
        sw.stats()  # every value above is in the spool: ~10 sealed files wait for the endpoint
        assert wait_until(lambda: sw.stats()["sidecar"]["uploads"]["failed_attempts"] >= 1, timeout=100)
        up = sw.stats()["sidecar"]["uploads"]
        assert len(up["pending"]) >= 2 and up["last_error"]
        endpoint.start()
        for i in range(1500, 2000):
            sw.add_scalar("loss", float(i), i)
    up = sw.stats()["sidecar"]
    assert up is None or up["uploads"]["pending"] == []
    _fs().invalidate_cache()
    values = tensor_values(load_multiplexer(url), ".", "loss")
    assert [s for s, _ in values] == list(range(2000))


def test_close_with_the_endpoint_down_names_the_files_and_the_spool(bucket, endpoint, tmp_path, monkeypatch, recwarn):
    monkeypatch.setenv("MXSIDECAR_UPLOAD_WAIT_SECS", "1")
    spool = tmp_path / "spool"
    sw = SidecarWriter(f"gs://{bucket}/run", spool_dir=str(spool), flush_secs=60)
    endpoint.stop()
    sw.add_scalar("x", 1.0, 0)
    try:
        with pytest.raises(SidecarError) as err:
            sw.close()
    finally:
        endpoint.start()
    text = str(err.value) + str(err.value.__cause__)
    (name,) = [n for n in os.listdir(spool) if "tfevents" in n]
    assert "1 files were not uploaded to gs://" in text and f"{name}; they are kept in the spool {spool}" in text
    assert (spool / name).stat().st_size > 0
    assert not [w for w in recwarn if "lost with the sidecar" in str(w.message)]
