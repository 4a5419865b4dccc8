"""Train a small Gluon CNN with the Gluon Estimator and log it with ``SidecarHandler``.

    python examples/estimator_handler.py [--logdir ./logs] [--epochs 3] [--quick]

One event handler logs the training metrics, the learning rate and the batch loss every
few batches, the validation metrics every epoch, and histograms of every parameter and
gradient every epoch, all without waiting on MXNet's engine.  The data are synthetic
8x8 "glyphs" (ten fixed random patterns plus noise), so the script runs anywhere.
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
from mxsidecar.integrations import SidecarHandler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--logdir", default="./logs")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="a few steps only (CI)")
    args = p.parse_args()

    import mxnet as mx
    from mxnet import gluon
    from mxnet.gluon.contrib.estimator import Estimator

    rng = np.random.default_rng(1)
    x_train, y_train = make_data(256 if args.quick else 4096, rng)
    x_val, y_val = make_data(128 if args.quick else 512, rng)
    train = gluon.data.DataLoader(gluon.data.ArrayDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True)
    val = gluon.data.DataLoader(gluon.data.ArrayDataset(x_val, y_val), batch_size=args.batch_size)
    epochs = 2 if args.quick else args.epochs

    net = build_net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 2e-3})
    # No train_metrics given: the Estimator picks accuracy and a running loss for this loss.
    est = Estimator(net, loss, trainer=trainer, context=mx.cpu())

    run = os.path.join(args.logdir, time.strftime("estimator-%Y%m%d-%H%M%S"))
    with SidecarWriter(run) as sw:
        # train/accuracy, train/softmaxcrossentropyloss, train/learning_rate, train/loss
        # every 2 batches; val/* and histograms of every parameter (and gradient) per epoch.
        handler = SidecarHandler(sw, log_every=2, histograms_every=1, param_prefix="params/")
        est.fit(train, val_data=val, epochs=epochs, event_handlers=[handler])
    print_tensorboard_hint(run, args.logdir)


if __name__ == "__main__":
    main()
