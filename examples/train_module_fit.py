"""Train a small MLP with MXNet's Module API and log it with mxsidecar's fit callbacks.

    python examples/train_module_fit.py [--logdir ./logs] [--epochs 4] [--quick]

``Module.fit`` gets the three callbacks of :mod:`mxsidecar.integrations` (training
metrics every few batches, parameter and gradient histograms and validation metrics
every epoch) and a monitor that sends op outputs, weights and gradients to the writer
as histograms instead of printing them.  The data are synthetic 8x8 "glyphs" (ten fixed
random patterns plus noise), so the script runs anywhere without downloads.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout too

from _common import print_tensorboard_hint

from mxsidecar import SidecarWriter
from mxsidecar.integrations import batch_end_callback, epoch_end_callback, eval_end_callback, monitor_to_writer


def make_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    patterns = np.random.default_rng(0).random((10, 64)).astype(np.float32)
    labels = rng.integers(0, 10, n)
    features = patterns[labels] + 0.35 * rng.standard_normal((n, 64)).astype(np.float32)
    return features.astype(np.float32), labels.astype(np.float32)


def build_symbol():
    import mxnet as mx

    data = mx.sym.var("data")
    fc1 = mx.sym.FullyConnected(data, num_hidden=32, name="fc1")
    bn1 = mx.sym.BatchNorm(fc1, name="bn1")  # auxiliary states: moving mean and variance
    act1 = mx.sym.Activation(bn1, act_type="relu", name="relu1")
    fc2 = mx.sym.FullyConnected(act1, num_hidden=10, name="fc2")
    return mx.sym.SoftmaxOutput(fc2, name="softmax")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--logdir", default="./logs")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--quick", action="store_true", help="a few steps only (CI)")
    args = p.parse_args()

    import mxnet as mx

    logging.basicConfig(level=logging.INFO, format="%(message)s")  # fit's own epoch summaries
    rng = np.random.default_rng(1)
    x_train, y_train = make_data(256 if args.quick else 4096, rng)
    x_val, y_val = make_data(128 if args.quick else 512, rng)
    train = mx.io.NDArrayIter(x_train, y_train, args.batch_size, shuffle=True, label_name="softmax_label")
    val = mx.io.NDArrayIter(x_val, y_val, args.batch_size, label_name="softmax_label")
    epochs = 2 if args.quick else args.epochs

    mod = mx.mod.Module(build_symbol(), context=mx.cpu())
    run = os.path.join(args.logdir, time.strftime("module-%Y%m%d-%H%M%S"))
    with SidecarWriter(run) as sw:
        batches = batch_end_callback(sw, every=2, prefix="train")  # train/accuracy, train/cross-entropy
        mod.fit(
            train,
            eval_data=val,
            eval_metric=["acc", "ce"],
            optimizer="adam",
            optimizer_params={"learning_rate": 2e-3},
            initializer=mx.init.Xavier(),
            num_epoch=epochs,
            batch_end_callback=[batches, mx.callback.Speedometer(args.batch_size, 50, auto_reset=False)],
            # Histograms of every weight, bias and BatchNorm state, and of the gradients,
            # at the global step of each epoch's last batch (steps_from), as val/*.
            epoch_end_callback=epoch_end_callback(sw, mod, grads=True, prefix="params/", steps_from=batches),
            eval_end_callback=eval_end_callback(sw, prefix="val", steps_from=batches),
            # Every 4th batch: the outputs of fc1 and relu1, and the weight gradients.
            monitor=monitor_to_writer(sw, interval=4, pattern=r"fc1_output|relu1_output|.*_weight_grad"),
        )
        sw.add_graph(mod.symbol, input_shapes={"data": (args.batch_size, 64)})
    print_tensorboard_hint(run, args.logdir)


if __name__ == "__main__":
    main()
