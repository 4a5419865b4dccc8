"""The README's main example runs (quick mode) and TensorBoard's loader reads every kind it logs."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from typing import Any

import pytest
from conftest import load_multiplexer

pytestmark = pytest.mark.timeout(300)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(script: str, logdir: str, run_prefix: str) -> tuple[str, Any]:
    """Run ``examples/<script> --quick``; its run directory and TensorBoard's multiplexer over it."""
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", script), "--quick", "--logdir", logdir],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tensorboard --logdir" in out.stdout
    (run,) = glob.glob(os.path.join(logdir, run_prefix + "-*"))
    return run, load_multiplexer(run)


def test_train_gluon_quick(tmp_path) -> None:
    pytest.importorskip("mxnet")
    run, mux = run_example("train_gluon.py", str(tmp_path), "gluon")
    for plugin, tag in [
        ("scalars", "train/loss"),
        ("scalars", "val/accuracy"),
        ("histograms", "conv0_weight/grad"),
        ("images", "data/samples"),
        ("pr_curves", "val/pr_class0"),
        ("text", "config"),
        ("hparams", "_hparams_/session_start_info"),
    ]:
        tags = {t for r in mux.PluginRunToTagToContent(plugin).values() for t in r}
        assert any(t.endswith(tag) or t == tag for t in tags), (plugin, tag, sorted(tags)[:10])
    assert mux.Graph(".") is not None
    assert os.path.exists(os.path.join(run, "projector_config.pbtxt"))


def test_tuning_backpressure_quick() -> None:
    """The tuning example prints its table of settings and their costs."""
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "tuning_backpressure.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "on_full" in out.stdout and "blocked" in out.stdout


def test_train_numpy_quick(tmp_path) -> None:
    """The example for stacks without MXNet (Python 3.12+): every kind but the graph,
    from numpy arrays, read back by TensorBoard's loader."""
    run, mux = run_example("train_numpy.py", str(tmp_path), "numpy")
    for plugin, tag in [
        ("scalars", "train/loss"),
        ("scalars", "val/accuracy"),
        ("histograms", "weight/grad"),
        ("images", "data/samples"),
        ("images", "weights/classes"),  # the video, an animated GIF
        ("audio", "weights/tone"),
        ("pr_curves", "val/pr_class0"),
        ("text", "config"),
        ("custom_scalars", "custom_scalars__config__"),
        ("hparams", "_hparams_/session_start_info"),
    ]:
        tags = {t for r in mux.PluginRunToTagToContent(plugin).values() for t in r}
        assert tag in tags, (plugin, tag, sorted(tags)[:10])
    (loss,) = [e for e in mux.Tensors(".", "train/loss") if e.step == 0]
    assert loss.tensor_proto.float_val[0] > 1.0  # log(10) at the start, before any learning
    assert os.path.exists(os.path.join(run, "projector_config.pbtxt"))
