"""An ``s3://`` logdir against a real S3 endpoint: moto's server on 127.0.0.1, read back
with TensorBoard's own loader from the ``s3://`` URL (``S3_ENDPOINT``), as a user's
TensorBoard would.  Skipped where moto or s3fs is not installed (tox's py311-pb7 has them:
the ``s3test`` extra).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
import remote_scenarios as scenarios
from conftest import load_multiplexer, tensor_values, wait_until

from mxsidecar import SidecarWriter

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def endpoint():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # moto's state is per process: a restarted server on the same port keeps the buckets.
    ep = scenarios.Endpoint(
        lambda port: moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    )
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


STORE = scenarios.Store("s3", _objects)


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
    from test_tensorboard_server import get_json, poll, q, tensorboard_server

    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", "2048")
    url = f"s3://{bucket}/logs"
    with SidecarWriter(url, spool_dir=str(tmp_path / "spool"), flush_secs=0.2) as sw:
        for i in range(300):
            sw.add_scalar("loss", 1.0 / (i + 1), i)
        sw.add_scalars("lr", {"a": 0.1, "b": 0.2}, 0)
    assert len(_objects(bucket, "logs/")) >= 6
    with tensorboard_server(url) as base:

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
