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
import uuid

import pytest
import remote_scenarios as scenarios

# gcsfs reads this once, when it is imported (here, or by fsspec in TensorBoard's loader):
# else its GCSFileSystem probes each bucket for hierarchical namespaces over gRPC, which the
# emulator does not answer, and waits a minute for that on every new instance.  The sidecar
# inherits it.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
gcsfs = pytest.importorskip("gcsfs")
emulator = pytest.importorskip("gcp_storage_emulator.server")
pytestmark = pytest.mark.timeout(180)


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
    # Buckets and objects on disk: a server restarted on the same port reads the same directory.
    data_dir = str(tmp_path_factory.mktemp("gcs"))
    ep = scenarios.Endpoint(lambda port: emulator.create_server("127.0.0.1", port, in_memory=False, data_dir=data_dir))
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


def _refresh() -> None:
    _fs().invalidate_cache()  # the loader's gcsfs instance is fsspec's cached one


STORE = scenarios.Store("gs", _objects, _refresh, client_retries=True)


def test_a_missing_bucket_is_a_valueerror_in_the_constructor(bucket, tmp_path, monkeypatch):
    scenarios.missing_bucket_is_a_valueerror(STORE, bucket, tmp_path, monkeypatch)


def test_many_rolled_files_read_back_complete_and_in_order(bucket, tmp_path, monkeypatch):
    scenarios.many_rolled_files_read_back(STORE, bucket, tmp_path, monkeypatch)


def test_a_value_is_visible_remotely_within_flush_secs_without_flush_or_close(bucket, tmp_path):
    scenarios.visible_within_flush_secs(STORE, bucket, tmp_path)


def test_the_endpoint_stopped_mid_run_and_restarted_loses_nothing(bucket, endpoint, tmp_path, monkeypatch):
    scenarios.endpoint_stopped_and_restarted(STORE, bucket, endpoint, tmp_path, monkeypatch)


def test_close_with_the_endpoint_down_names_the_files_and_the_spool(bucket, endpoint, tmp_path, monkeypatch, recwarn):
    scenarios.close_with_endpoint_down(STORE, bucket, endpoint, tmp_path, monkeypatch, recwarn)
