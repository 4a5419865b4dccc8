"""What every object store's logdir must do, written once.

``test_remote_s3.py`` (moto's S3 server) and ``test_remote_gcs.py`` (a GCS emulator) run
each scenario against their own server, with fixtures of their own (``bucket``: a new
bucket and the environment the sidecar and TensorBoard need; ``endpoint``: an
:class:`Endpoint`) and a :class:`Store` saying what differs between the stores.  Every
read-back is TensorBoard's own loader on the URL, as a user's TensorBoard would read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from conftest import free_port, load_multiplexer, tensor_values, wait_until

from mxsidecar import SidecarError, SidecarWriter


class Endpoint:
    """A store's server on a fixed port: stop() and start() keep the port and the buckets,
    as an outage would.  ``serve(port)`` makes the server (anything with start and stop)."""

    def __init__(self, serve: Callable[[int], Any]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._serve = serve
        self.server: Any = None

    def start(self) -> None:
        self.server = self._serve(self.port)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def _nothing_cached() -> None:
    pass


class Store(NamedTuple):
    scheme: str  # 's3', 'gs'
    objects: Callable[[str, str], dict[str, bytes]]  # (bucket, key prefix) -> {key: content}
    # Before TensorBoard's loader reads back: forget the file system's cached listings.
    refresh: Callable[[], None] = _nothing_cached
    # The client retries a refused connection itself before the uploader sees a failure
    # (gcsfs: 6 times over ~30 s; s3fs fails at once), so a failure takes that long to count.
    client_retries: bool = False


def missing_bucket_is_a_valueerror(store: Store, bucket: str, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="bucket or directory does not exist"):
        SidecarWriter(f"{store.scheme}://{bucket}-missing/run")
    assert os.listdir(tmp_path) == []  # neither a spool nor a local 's3:' or 'gs:' directory


def many_rolled_files_read_back(store: Store, bucket: str, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", "4096")  # a new file every ~100 scalars
    url = f"{store.scheme}://{bucket}/logs/run1"
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
    objects = store.objects(bucket, "logs/run1/")
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


def visible_within_flush_secs(store: Store, bucket: str, tmp_path: Any) -> None:
    url = f"{store.scheme}://{bucket}/run"
    with SidecarWriter(url, spool_dir=str(tmp_path / "spool"), flush_secs=0.5) as sw:
        sw.add_scalar("x", 42.0, 7)

        def seen() -> bool:
            store.refresh()
            return "x" in load_multiplexer(url).Runs().get(".", {}).get("tensors", [])

        assert wait_until(seen, timeout=30, interval=0.2)
        assert [(s, float(v)) for s, v in tensor_values(load_multiplexer(url), ".", "x")] == [(7, 42.0)]


def endpoint_stopped_and_restarted(
    store: Store, bucket: str, endpoint: Endpoint, tmp_path: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", "4096")
    # flush() and close() wait this long for uploads: briefly, unless the client's own
    # retries must be waited out for the put under way to go through.
    monkeypatch.setenv("MXSIDECAR_UPLOAD_WAIT_SECS", "120" if store.client_retries else "1")
    url = f"{store.scheme}://{bucket}/run"
    with SidecarWriter(url, spool_dir=str(tmp_path / "spool"), flush_secs=0.2) as sw:
        for i in range(500):
            sw.add_scalar("loss", float(i), i)
        sw.flush()
        endpoint.stop()
        for i in range(500, 1500):
            sw.add_scalar("loss", float(i), i)
        if store.client_retries:
            sw.stats()  # every value above is in the spool: ~10 sealed files wait for the endpoint
        else:
            sw.flush()  # returns (bounded wait); the files wait in the spool
        failures = 1 if store.client_retries else 2
        assert wait_until(
            lambda: sw.stats()["sidecar"]["uploads"]["failed_attempts"] >= failures,
            timeout=100 if store.client_retries else 30,
        )
        up = sw.stats()["sidecar"]["uploads"]
        assert len(up["pending"]) >= 2 and up["last_error"]
        endpoint.start()
        for i in range(1500, 2000):
            sw.add_scalar("loss", float(i), i)
    up = sw.stats()["sidecar"]
    assert up is None or up["uploads"]["pending"] == []
    store.refresh()
    values = tensor_values(load_multiplexer(url), ".", "loss")
    assert [s for s, _ in values] == list(range(2000))


def close_with_endpoint_down(
    store: Store, bucket: str, endpoint: Endpoint, tmp_path: Any, monkeypatch: Any, recwarn: Any
) -> None:
    monkeypatch.setenv("MXSIDECAR_UPLOAD_WAIT_SECS", "1")
    spool = tmp_path / "spool"
    sw = SidecarWriter(f"{store.scheme}://{bucket}/run", spool_dir=str(spool), flush_secs=60)
    endpoint.stop()
    sw.add_scalar("x", 1.0, 0)  # with CLOSE right behind it: likely one batch for the sidecar
    try:
        with pytest.raises(SidecarError) as err:
            sw.close()
    finally:
        endpoint.start()
    text = str(err.value) + str(err.value.__cause__)
    (name,) = [n for n in os.listdir(spool) if "tfevents" in n]
    assert f"1 files were not uploaded to {store.scheme}://" in text
    assert f"{name}; they are kept in the spool {spool}" in text
    assert (spool / name).stat().st_size > 0
    # The value is in the spool, not lost: the sidecar reported it done before uploading.
    assert not [w for w in recwarn if "lost with the sidecar" in str(w.message)]
