"""A real parameter-server job on localhost (1 scheduler, 1 server, 2 workers, kvstore
``dist_sync``) that trains and logs through ``SidecarWriter(kvstore=kv)``, read back with
TensorBoard's loader; the autouse leak check then finds no sidecar and no segment left."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import event_files, load_multiplexer, tensor_values

pytestmark = pytest.mark.timeout(300)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_job(logdir: str, ranks: str) -> str:
    pytest.importorskip("mxnet")
    script = os.path.join(ROOT, "examples", "train_distributed.py")
    args = ["--launch-local", "2", "--quick", "--ranks", ranks, "--logdir", logdir, "--timeout", "240"]
    out = subprocess.run(
        [sys.executable, script, *args],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


def test_dist_sync_ranks_zero_only_rank_0_writes(tmp_path) -> None:
    stdout = run_job(str(tmp_path), "zero")
    assert "rank 0 of 2: writes=True" in stdout and "rank 1 of 2: writes=False" in stdout
    files = event_files(str(tmp_path))
    assert [os.path.dirname(f) for f in files] == [str(tmp_path)], files  # one file, in the logdir itself
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(files[0])]  # rank 1 made no directory
    mux = load_multiplexer(str(tmp_path))
    steps = [step for step, _ in tensor_values(mux, ".", "train/loss")]
    assert steps == list(range(len(steps))) and len(steps) == 4  # 128 samples per worker, batches of 32
    assert [s for s, _ in tensor_values(mux, ".", "val/accuracy")] == [4]


def test_dist_sync_ranks_all_one_run_per_rank(tmp_path) -> None:
    stdout = run_job(str(tmp_path), "all")
    assert "rank 0 of 2: writes=True" in stdout and "rank 1 of 2: writes=True" in stdout
    # Both workers run on this machine and log to one logdir: one sidecar served them both.
    pids = {line.rsplit(" ", 1)[1] for line in stdout.splitlines() if ": writes=True, sidecar pid " in line}
    assert len(pids) == 1, stdout
    assert sorted(os.listdir(tmp_path)) == ["rank_0", "rank_1"]
    mux = load_multiplexer(str(tmp_path))
    assert sorted(mux.Runs()) == ["rank_0", "rank_1"]
    losses = {run: [(s, float(v)) for s, v in tensor_values(mux, run, "train/loss")] for run in ("rank_0", "rank_1")}
    assert [s for s, _ in losses["rank_0"]] == [s for s, _ in losses["rank_1"]] == [0, 1, 2, 3]
    # Each rank logged its own shard's loss: the same weights at step 0, different batches.
    assert losses["rank_0"] != losses["rank_1"]
    for run in ("rank_0", "rank_1"):
        assert "conv0_weight" in mux.GetAccumulator(run).Tags()["tensors"]
