"""An ``s3://`` logdir against a real S3 endpoint: moto's server on 127.0.0.1, read back
with TensorBoard's own loader from the ``s3://`` URL (``S3_ENDPOINT``), as a user's
TensorBoard would.  Skipped where moto or s3fs is not installed (tox's py311-pb7 has them:
the ``s3test`` extra).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid

import pytest
from conftest import load_multiplexer, tensor_values, wait_until

from mxsidecar import SidecarError, SidecarWriter

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")
pytestmark = pytest.mark.timeout(180)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Endpoint:
    """moto's S3 server; stop() and start() keep its port and its buckets (moto's state is per process)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = None

    def start(self) -> None:
        self.server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@pytest.fixture(scope="module")
def endpoint():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    ep = Endpoint()
    ep.start()
    yield ep
    ep.stop()


@pytest.fixture
def bucket(endpoint, monkeypatch, tmp_path):
    """A new bucket; the environment a user's TensorBoard and the sidecar both need."""
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "S3_ENDPOINT": endpoint.url,  # TensorBoard's loader
        "AWS_ENDPOINT_URL": endpoint.url,  # botocore, so s3fs in the sidecar too
    }.items():
        monkeypatch.setenv(k, v)
    if endpoint.server is None:
        endpoint.start()
    import boto3

    name = "bkt-" + uuid.uuid4().hex[:12]
    boto3.client("s3", endpoint_url=endpoint.url).create_bucket(Bucket=name)
    yield name
    if endpoint.server is None:
        endpoint.start()  # a test that stopped it and failed


def _objects(bucket: str, prefix: str) -> dict[str, bytes]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return out


def test_a_missing_bucket_is_a_valueerror_in_the_constructor(bucket, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="bucket or directory does not exist"):
        SidecarWriter(f"s3://{bucket}-missing/run")
    assert os.listdir(tmp_path) == []


def test_many_rolled_files_read_back_complete_and_in_order(bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", "4096")  # a new file every ~100 scalars
    url = f"s3://{bucket}/logs/run1"
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
    sw.export_scalars(str(tmp_path / "scalars.json"))  # mxboard's export reads every rolled file (the spool's)
    exported = json.loads((tmp_path / "scalars.json").read_text())
    assert [s for _, s, _ in exported[f"{url}/loss"]] == list(range(3000))
    objects = _objects(bucket, "logs/run1/")
    top = sorted(k for k in objects if k.count("/") == 2)
    assert len(top) >= 20
    for key, data in objects.items():  # every object is the spool's file, uploaded once, whole
        assert (spool / key[len("logs/run1/") :]).read_bytes() == data
    # TensorBoard's own loader, from the URL: every value, in order, across every file.
    mux = load_multiplexer(f"s3://{bucket}/logs/run1")
    assert sorted(mux.Runs()) == [".", "pair/a", "pair/b"]
    values = tensor_values(mux, ".", "loss")
    assert [s for s, _ in values] == list(range(3000))
    assert [float(v) for _, v in values] == [float(i) for i in range(3000)]
    assert len(tensor_values(mux, ".", "w")) == 6
    assert [float(v) for _, v in tensor_values(mux, "pair/b", "pair")] == [-500.0 * k for k in range(6)]


def test_a_value_is_visible_remotely_within_flush_secs_without_flush_or_close(bucket, tmp_path):
    url = f"s3://{bucket}/run"
    with SidecarWriter(url, spool_dir=str(tmp_path / "spool"), flush_secs=0.5) as sw:
        sw.add_scalar("x", 42.0, 7)

        def seen() -> bool:
            return "x" in load_multiplexer(url).Runs().get(".", {}).get("tensors", [])

        assert wait_until(seen, timeout=30, interval=0.2)
        assert [(s, float(v)) for s, v in tensor_values(load_multiplexer(url), ".", "x")] == [(7, 42.0)]


def test_the_endpoint_stopped_mid_run_and_restarted_loses_nothing(bucket, endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", "4096")
    monkeypatch.setenv("MXSIDECAR_UPLOAD_WAIT_SECS", "1")  # flush() waits this long for uploads
    url = f"s3://{bucket}/run"
    with SidecarWriter(url, spool_dir=str(tmp_path / "spool"), flush_secs=0.2) as sw:
        for i in range(500):
            sw.add_scalar("loss", float(i), i)
        sw.flush()
        endpoint.stop()
        for i in range(500, 1500):
            sw.add_scalar("loss", float(i), i)
        sw.flush()  # returns (bounded wait); the files wait in the spool
        assert wait_until(lambda: sw.stats()["sidecar"]["uploads"]["failed_attempts"] >= 2, timeout=30)
        up = sw.stats()["sidecar"]["uploads"]
        assert len(up["pending"]) >= 2 and up["last_error"]
        endpoint.start()
        for i in range(1500, 2000):
            sw.add_scalar("loss", float(i), i)
    up = sw.stats()["sidecar"]
    assert up is None or up["uploads"]["pending"] == []
    values = tensor_values(load_multiplexer(url), ".", "loss")
    assert [s for s, _ in values] == list(range(2000))


def test_close_with_the_endpoint_down_names_the_files_and_the_spool(bucket, endpoint, tmp_path, monkeypatch, recwarn):
    monkeypatch.setenv("MXSIDECAR_UPLOAD_WAIT_SECS", "1")
    spool = tmp_path / "spool"
    sw = SidecarWriter(f"s3://{bucket}/run", spool_dir=str(spool), flush_secs=60)
    endpoint.stop()
    sw.add_scalar("x", 1.0, 0)  # with CLOSE right behind it: likely one batch for the sidecar
    try:
        with pytest.raises(SidecarError) as err:
            sw.close()
    finally:
        endpoint.start()
    text = str(err.value) + str(err.value.__cause__)
    (name,) = [n for n in os.listdir(spool) if "tfevents" in n]
    assert "1 files were not uploaded to s3://" in text and f"{name}; they are kept in the spool {spool}" in text
    assert (spool / name).stat().st_size > 0
    # The value is in the spool, not lost: the sidecar reported it done before uploading.
    assert not [w for w in recwarn if "lost with the sidecar" in str(w.message)]


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from mxsidecar import SidecarWriter
    sw = SidecarWriter(sys.argv[1], spool_dir=sys.argv[2], flush_secs=60)
    for i in range(1000):
        sw.add_scalar("loss", float(i), i)
    sw.stats()  # answered after every value before it is in the spool; nothing sealed or uploaded yet
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_killed_trainer_s_sidecar_uploads_everything_it_received(bucket, tmp_path):
    url = f"s3://{bucket}/run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    # flush_secs=60 and no flush(): nothing was sealed; only the sidecar's own exit path uploads.
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(tmp_path / "spool")], env=env, capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()

    def complete() -> bool:
        try:
            return [s for s, _ in tensor_values(load_multiplexer(url), ".", "loss")] == list(range(1000))
        except KeyError:  # the run or the tag is not there (yet)
            return False

    assert wait_until(complete, timeout=60, interval=0.5)


def test_credentials_that_cannot_write_are_a_valueerror_in_the_constructor(bucket, tmp_path, monkeypatch):
    from moto import settings

    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # the server checks keys from now on
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="cannot be written: permission denied; check the credentials"):
        SidecarWriter(f"s3://{bucket}/run", spool_dir=str(tmp_path / "spool"))
    assert os.listdir(tmp_path) == []  # neither a spool nor a local 's3:' directory


def test_a_tensorboard_server_on_the_s3_url_serves_every_rolled_file(bucket, tmp_path, monkeypatch):
    """The real client: ``tensorboard --logdir s3://...`` (it falls back to its Python
    loader for s3:// by itself), the scalars plugin queried over HTTP."""
    import shutil

    from test_tensorboard_server import get_json, poll, q

    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", "2048")
    url = f"s3://{bucket}/logs"
    with SidecarWriter(url, spool_dir=str(tmp_path / "spool"), flush_secs=0.2) as sw:
        for i in range(300):
            sw.add_scalar("loss", 1.0 / (i + 1), i)
        sw.add_scalars("lr", {"a": 0.1, "b": 0.2}, 0)
    assert len(_objects(bucket, "logs/")) >= 6
    exe = shutil.which("tensorboard", path=os.path.dirname(sys.executable)) or shutil.which("tensorboard")
    assert exe, "the tensorboard command (test extra) is not installed"
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--logdir", url, "--host", "127.0.0.1", "--port", str(port), "--reload_interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def loss():
            data = get_json(base, "/data/plugin/scalars/scalars?" + q(run=".", tag="loss"))
            return data if len(data) == 300 else None

        data = poll(loss, timeout=120)
        assert [d[1] for d in data] == list(range(300)) and data[-1][2] == pytest.approx(1 / 300)

        def lr_runs():
            # TensorBoard loads the runs one by one: the first answer may name only lr/a.
            runs = {r for r, t in get_json(base, "/data/plugin/scalars/tags").items() if "lr" in t}
            return runs if len(runs) >= 2 else None

        assert poll(lr_runs) == {"lr/a", "lr/b"}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
