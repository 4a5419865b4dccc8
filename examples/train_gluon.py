"""Train a small Gluon CNN and log it with mxsidecar, then print how to open TensorBoard.

    python examples/train_gluon.py [--logdir ./logs] [--epochs 3] [--quick]

The data are synthetic 8x8 "glyphs": ten fixed random patterns, each sample one of
them plus noise, so the script runs anywhere without downloads and the network
visibly learns.  Every ``sw.add_*`` call below returns at once: the values travel to
the sidecar process, which encodes and writes them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout too

from _common import build_net, make_data, print_tensorboard_hint

from mxsidecar import SidecarWriter


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--logdir", default="./logs")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="a few steps only (CI)")
    args = p.parse_args()

    try:
        import mxnet as mx
        from mxnet import autograd, gluon
    except ImportError as e:  # MXNet 1.9.1 runs on Python 3.8-3.11 only (numpy < 1.24)
        sys.exit(
            f"this example needs MXNet ({e}); pip install '.[mxnet]' installs it on Python 3.8-3.11. "
            "Without MXNet, examples/train_numpy.py logs every kind from numpy arrays."
        )

    rng = np.random.default_rng(1)
    n_train = 256 if args.quick else 4096
    x_train, y_train = make_data(n_train, rng)
    x_val, y_val = make_data(512, rng)
    train = gluon.data.DataLoader(gluon.data.ArrayDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True)

    net = build_net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 2e-3})
    epochs = 1 if args.quick else args.epochs

    run = os.path.join(args.logdir, time.strftime("gluon-%Y%m%d-%H%M%S"))
    with SidecarWriter(run) as sw:
        sw.add_text("config", f"| setting | value |\n|---|---|\n| epochs | {epochs} |\n| batch | {args.batch_size} |")
        sw.add_images("data/samples", np.clip(x_train[:16], 0, 1), 0)  # float images must be in [0, 1]
        step = 0
        for epoch in range(epochs):
            for x, y in train:
                with autograd.record():
                    loss = loss_fn(net(x), y).mean()
                loss.backward()
                trainer.step(1)
                if step == 0:
                    sw.add_graph(net, input_shapes={"data": x.shape})  # hybridized and run once now
                # NDArrays, logged without asnumpy()/asscalar(): the engine copies them.
                sw.add_scalar("train/loss", loss, step)
                if step % 10 == 0:
                    for name, p in net.collect_params().items():
                        sw.add_histogram(f"{name}/grad", p.grad(), step)
                        sw.add_histogram(name, p.data(), step)
                step += 1
            logits = net(mx.nd.array(x_val))
            acc = (logits.argmax(axis=1) == mx.nd.array(y_val)).mean()
            sw.add_scalar("val/accuracy", acc, step)
            sw.add_scalars("lr", {"adam": trainer.learning_rate}, step)
            # One-vs-rest PR curve of class 0, from softmax probabilities.
            prob0 = mx.nd.softmax(logits)[:, 0]
            sw.add_pr_curve("val/pr_class0", (y_val == 0).astype(np.uint8), prob0, 101, step)
            print(f"epoch {epoch}: loss {loss.asscalar():.3f}, val accuracy {acc.asscalar():.3f}")
        # The validation set in the Projector: penultimate features, labels, thumbnails.
        features = net[:4](mx.nd.array(x_val[:256]))
        sw.add_embedding("val/features", features, labels=[str(int(c)) for c in y_val[:256]],
                         images=np.clip(x_val[:256], 0, 1), global_step=step)  # fmt: skip
        sw.add_hparams({"lr": 2e-3, "batch_size": args.batch_size, "optimizer": "adam"},
                       {"hparam/accuracy": float(acc.asscalar())}, global_step=step)  # fmt: skip
    print_tensorboard_hint(run, args.logdir)


if __name__ == "__main__":
    main()
