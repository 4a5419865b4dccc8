"""What the examples share: the synthetic data, the small CNN, and the closing hint."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def make_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic 8x8 "glyphs": ten fixed random patterns, each sample one of them plus
    noise, so the examples run anywhere without downloads and the network visibly learns."""
    patterns = np.random.default_rng(0).random((10, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, n)
    images = patterns[labels] + 0.35 * rng.standard_normal((n, 1, 8, 8)).astype(np.float32)
    return images.astype(np.float32), labels.astype(np.float32)


def build_net() -> Any:
    """A small Gluon CNN (an mxnet HybridBlock) for the 8x8 glyphs."""
    from mxnet import gluon

    net = gluon.nn.HybridSequential()
    net.add(
        gluon.nn.Conv2D(16, kernel_size=3, padding=1, activation="relu"),
        gluon.nn.MaxPool2D(2),
        gluon.nn.Flatten(),
        gluon.nn.Dense(64, activation="relu"),
        gluon.nn.Dense(10),
    )
    return net


def print_tensorboard_hint(run: str, logdir: str) -> None:
    print(f"\nLogged to {os.path.abspath(run)}. To look at it:\n")
    print("    pip install tensorboard")
    print(f"    tensorboard --logdir {os.path.abspath(logdir)}\n")
    print("and open http://localhost:6006")
