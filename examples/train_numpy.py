"""Train a softmax classifier in plain numpy and log every kind mxsidecar writes.

    python examples/train_numpy.py [--logdir ./logs] [--steps 300] [--quick]

For stacks where MXNet cannot run (Python 3.12+: mxnet 1.9.1 needs numpy < 1.24),
and as the shortest tour of the API: scalars, histograms, images, audio, video, text,
a pr-curve, an embedding with labels and thumbnails, hparams and a custom-scalars
layout, all from numpy arrays (``examples/train_gluon.py`` is the MXNet example).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout too

from _common import make_data, print_tensorboard_hint

from mxsidecar import SidecarWriter


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--logdir", default="./logs")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--quick", action="store_true", help="a few steps only (CI)")
    args = p.parse_args()
    steps = 40 if args.quick else args.steps

    rng = np.random.default_rng(1)
    x, y = make_data(1024, rng)  # (N, 1, 8, 8) glyphs, labels 0-9 (as float32)
    x_val, y_val = make_data(256, rng)
    y, y_val = y.astype(np.int64), y_val.astype(np.int64)
    pictures, pictures_val = np.clip(x[:16], 0, 1), np.clip(x_val[:200], 0, 1)  # images take [0, 1]
    flat, flat_val = x.reshape(len(x), -1), x_val.reshape(len(x_val), -1)
    w = rng.normal(0, 0.01, (flat.shape[1], 10)).astype(np.float32)
    b = np.zeros(10, np.float32)
    onehot = np.eye(10, dtype=np.float32)[y]

    run = os.path.join(args.logdir, time.strftime("numpy-%Y%m%d-%H%M%S"))
    with SidecarWriter(run) as sw:
        sw.add_text("config", f"| lr | steps |\n|---|---|\n| {args.lr} | {steps} |")
        sw.add_custom_scalars({"training": {"loss": ["Multiline", ["train/loss", "val/loss"]]}})
        sw.add_image("data/samples", pictures, 0)  # NCHW float in [0, 1]: one grid
        for step in range(steps):
            prob = softmax(flat @ w + b)
            loss = float(-np.log(prob[np.arange(len(y)), y] + 1e-9).mean())
            grad = (prob - onehot) / len(y)
            gw, gb = flat.T @ grad, grad.sum(axis=0)
            w -= args.lr * gw
            b -= args.lr * gb
            sw.add_scalar("train/loss", loss, step)
            if step % 10 == 0:
                sw.add_histogram("weight", w, step)
                sw.add_histogram("weight/grad", gw, step)
                val_prob = softmax(flat_val @ w + b)
                sw.add_scalar("val/loss", float(-np.log(val_prob[np.arange(len(y_val)), y_val] + 1e-9).mean()), step)
                sw.add_scalar("val/accuracy", float((val_prob.argmax(axis=1) == y_val).mean()), step)
        val_prob = softmax(flat_val @ w + b)
        accuracy = float((val_prob.argmax(axis=1) == y_val).mean())
        sw.add_pr_curve("val/pr_class0", (y_val == 0).astype(np.int8), val_prob[:, 0].astype(np.float32), 201, steps)
        sw.add_embedding("val/inputs", flat_val[:200], labels=[str(c) for c in y_val[:200]], images=pictures_val)
        # A second of the class-0 weight pattern, as sound; and the learned weights as a 10-frame video.
        tone = np.sin(np.linspace(0, 440 * 2 * np.pi, 16000, dtype=np.float32)) * 0.5
        sw.add_audio("weights/tone", tone * np.resize(np.abs(w[:, 0]) / (np.abs(w[:, 0]).max() + 1e-9), 16000), 16000)
        frames = (w.T.reshape(10, 1, 8, 8) - w.min()) / (w.max() - w.min() + 1e-9)
        sw.add_video("weights/classes", frames[None].astype(np.float32), steps, fps=2)
        sw.add_hparams({"lr": args.lr, "steps": steps}, {"hparam/accuracy": accuracy}, global_step=steps)
    print(f"validation accuracy {accuracy:.3f}")
    print_tensorboard_hint(run, args.logdir)


if __name__ == "__main__":
    main()
