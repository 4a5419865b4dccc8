"""The real client: `tensorboard --logdir` on 127.0.0.1, every plugin queried over HTTP.

TensorBoard 2.x loads event files with its Rust data server by default (--load_fast);
it is stricter than the Python loader (it ignores DT_DOUBLE scalars, for one), so both
are exercised."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import free_port

from mxsidecar import SidecarWriter

pytestmark = pytest.mark.timeout(240)


def get(base: str, path: str, data: bytes | None = None) -> bytes:
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


def get_json(base: str, path: str, data: bytes | None = None):
    return json.loads(get(base, path, data))


def poll(fn, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = fn()
            if got:
                return got
        except Exception as exc:  # server still starting or still loading
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"TensorBoard never served it: {last!r}")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> str:
    mx = pytest.importorskip("mxnet")
    d = str(tmp_path_factory.mktemp("tb"))
    rng = np.random.default_rng(0)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(8, activation="relu"), mx.gluon.nn.Dense(2))
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 4)))
    with SidecarWriter(d) as sw:
        for step in range(5):
            sw.add_scalar("loss", mx.nd.array([1.0 / (step + 1)]), step)
            sw.add_histogram("w", rng.normal(size=1000).astype(np.float32), step)
        sw.add_scalars("lr", {"a": 0.1, "b": 0.2}, 0)
        sw.add_text("notes", "**hi**", 0)
        sw.add_image("img", rng.integers(0, 256, (3, 8, 8)).astype(np.uint8), 0)
        sw.add_audio("snd", np.sin(np.linspace(0, 100, 4000)).astype(np.float32) * 0.5, 8000, 0)
        sw.add_pr_curve("pr", rng.integers(0, 2, 100), rng.random(100), 11, 0)
        sw.add_hparams({"lr": 0.1, "opt": "sgd"}, {"final/accuracy": 0.8}, global_step=5)
        sw.add_custom_scalars({"Train": {"loss": ["Multiline", ["loss"]]}})
        sw.add_graph(net)
        emb = rng.random((10, 3)).astype(np.float32)
        thumbs = rng.random((10, 3, 4, 4)).astype(np.float32)
        sw.add_embedding("emb", emb, labels=list("abcdefghij"), images=thumbs, global_step=0)
    return d


@contextlib.contextmanager
def tensorboard_server(logdir: str, *flags: str) -> Iterator[str]:
    """``tensorboard --logdir LOGDIR *FLAGS`` on 127.0.0.1 for the block: its base URL."""
    exe = shutil.which("tensorboard", path=os.path.dirname(sys.executable)) or shutil.which("tensorboard")
    assert exe, "the tensorboard command (test extra) is not installed"
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--logdir", logdir, "--host", "127.0.0.1", "--port", str(port), *flags, "--reload_interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module", params=["true", "false"], ids=["rust-data-server", "python-loader"])
def server(request, logdir):
    with tensorboard_server(logdir, f"--load_fast={request.param}") as base:
        poll(lambda: get_json(base, "/data/runs"))
        yield base


def q(**kw) -> str:
    return urllib.parse.urlencode(kw)


def test_scalars(server) -> None:
    tags = poll(lambda: get_json(server, "/data/plugin/scalars/tags").get(".", {}).get("loss"))
    assert tags is not None
    data = poll(lambda: get_json(server, "/data/plugin/scalars/scalars?" + q(run=".", tag="loss")))
    assert [d[1] for d in data] == list(range(5)) and data[0][2] == pytest.approx(1.0)
    runs = poll(lambda: {r for r, t in get_json(server, "/data/plugin/scalars/tags").items() if "lr" in t})
    assert runs == {"lr/a", "lr/b"}


def test_histograms(server) -> None:
    data = poll(lambda: get_json(server, "/data/plugin/histograms/histograms?" + q(run=".", tag="w")))
    assert len(data) == 5
    buckets = data[0][2]
    assert sum(b[2] for b in buckets) == pytest.approx(1000)
    assert -6 < buckets[0][0] < -1 and 1 < buckets[-1][1] < 6  # min..max, not +-1e20 (mxboard's spike)


def test_text(server) -> None:
    data = poll(lambda: get_json(server, "/data/plugin/text/text?" + q(run=".", tag="notes")))
    assert "<strong>hi</strong>" in data[0]["text"]


def test_images(server) -> None:
    data = poll(lambda: get_json(server, "/data/plugin/images/images?" + q(run=".", tag="img")))
    png = get(server, "/data/plugin/images/individualImage?" + data[0]["query"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_audio(server) -> None:
    data = poll(lambda: get_json(server, "/data/plugin/audio/audio?" + q(run=".", tag="snd")))
    wav = get(server, "/data/plugin/audio/individualAudio?" + data[0]["query"])
    assert wav[:4] == b"RIFF"


def test_pr_curves(server) -> None:
    data = poll(lambda: get_json(server, "/data/plugin/pr_curves/pr_curves?" + q(run=".", tag="pr")))
    (entry,) = data["."]
    # TensorBoard drops trailing thresholds no prediction reaches (TP + FP == 0)
    assert 2 <= len(entry["precision"]) == len(entry["recall"]) <= 11


def test_hparams(server) -> None:
    body = json.dumps({"experimentName": ""}).encode()
    exp = poll(lambda: get_json(server, "/data/plugin/hparams/experiment", body).get("hparamInfos"))
    assert {h["name"] for h in exp} == {"lr", "opt"}


def test_custom_scalars(server) -> None:
    layout = poll(lambda: get_json(server, "/data/plugin/custom_scalars/layout"))
    assert layout["category"][0]["title"] == "Train"


def test_graph(server) -> None:
    info = poll(lambda: get_json(server, "/data/plugin/graphs/info").get(".", {}).get("run_graph"))
    assert info
    pbtxt = poll(lambda: get(server, "/data/plugin/graphs/graph?" + q(run=".")))
    assert b"FullyConnected" in pbtxt


def test_projector(server) -> None:
    runs = poll(lambda: get_json(server, "/data/plugin/projector/runs"))
    assert "." in runs
    info = poll(lambda: get_json(server, "/data/plugin/projector/info?" + q(run=".")))
    (emb,) = info["embeddings"]
    name = emb["tensorName"]
    tensor = get(server, "/data/plugin/projector/tensor?" + q(run=".", name=name))
    assert len(tensor) == 10 * 3 * 4  # float32 rows
    meta = get(server, "/data/plugin/projector/metadata?" + q(run=".", name=name)).decode()
    assert meta.split("\n")[0] == "a"
    sprite = get(server, "/data/plugin/projector/sprite_image?" + q(run=".", name=name))
    assert sprite[:8] == b"\x89PNG\r\n\x1a\n"
