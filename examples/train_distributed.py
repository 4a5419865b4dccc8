"""Train the small Gluon CNN with the parameter-server kvstore (``dist_sync``) on one machine,
and log it with mxsidecar from every worker: only rank 0 writes (``--ranks zero``), or each
rank writes its own run (``--ranks all``).

    python examples/train_distributed.py --launch-local 2 [--ranks zero|all] [--logdir ./logs] [--quick]

``--launch-local N`` starts the job's processes itself, on 127.0.0.1, as MXNet's
``tools/launch.py --launcher local`` would: one scheduler, one server and N workers, each
this script with ``DMLC_ROLE`` set.  The same by hand, one shell per line::

    export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2
    DMLC_ROLE=scheduler python examples/train_distributed.py --logdir ./logs/dist
    DMLC_ROLE=server python examples/train_distributed.py --logdir ./logs/dist
    DMLC_ROLE=worker python examples/train_distributed.py --logdir ./logs/dist
    DMLC_ROLE=worker python examples/train_distributed.py --logdir ./logs/dist

Every worker runs the same code, ``SidecarWriter(run, kvstore=kv, ranks=...)``, with no
``if rank == 0``: the writer asks the kvstore who it is.  The scheduler and the server run
this script too (``import mxnet`` serves there and exits), and would never write even if
they reached the writer (``DMLC_ROLE``).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout too

from _common import build_net, make_data, print_tensorboard_hint

from mxsidecar import SidecarWriter


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_local(workers: int, argv: list[str], timeout: float) -> int:
    """Start a scheduler, a server and ``workers`` workers of this script; the workers' worst exit code."""
    env = dict(
        os.environ,
        DMLC_PS_ROOT_URI="127.0.0.1",
        DMLC_PS_ROOT_PORT=str(_free_port()),
        DMLC_NUM_SERVER="1",
        DMLC_NUM_WORKER=str(workers),
    )
    cmd = [sys.executable, os.path.abspath(__file__), *argv]
    roles = ["scheduler", "server"] + ["worker"] * workers
    procs = [subprocess.Popen(cmd, env=dict(env, DMLC_ROLE=role)) for role in roles]
    try:
        deadline = time.monotonic() + timeout
        codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs[2:]]
        for p in procs[:2]:  # ps-lite's scheduler and server leave once every worker has finalized
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        return max(codes)
    finally:
        for p in procs:  # a worker that failed leaves the others waiting on a barrier forever
            if p.poll() is None:
                p.kill()
                p.wait()


def train(args: argparse.Namespace) -> None:
    import mxnet as mx  # in the scheduler and the server, this import serves and exits
    from mxnet import autograd, gluon

    kv = mx.kv.create("dist_sync")
    rng = np.random.default_rng(1)
    x_all, y_all = make_data(256 if args.quick else 4096, rng)
    # Each worker trains on its own shard; the server sums the gradients (dist_sync).
    x_train, y_train = x_all[kv.rank :: kv.num_workers], y_all[kv.rank :: kv.num_workers]
    x_val, y_val = make_data(256, rng)
    train_data = gluon.data.DataLoader(gluon.data.ArrayDataset(x_train, y_train), batch_size=32, shuffle=True)

    mx.random.seed(1)  # the same initial weights on every worker
    net = build_net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=kv)
    epochs = 1 if args.quick else args.epochs

    with SidecarWriter(args.logdir, kvstore=kv, ranks=args.ranks) as sw:
        step = 0
        for epoch in range(epochs):
            for x, y in train_data:
                with autograd.record():
                    loss = loss_fn(net(x), y).mean()
                loss.backward()
                trainer.step(x.shape[0] * kv.num_workers)
                sw.add_scalar("train/loss", loss, step)  # each rank's own batch loss
                if step % 10 == 0:
                    for name, p in net.collect_params().items():
                        sw.add_histogram(name, p.data(), step)
                step += 1
            acc = (net(mx.nd.array(x_val)).argmax(axis=1) == mx.nd.array(y_val)).mean()
            sw.add_scalar("val/accuracy", acc, step)
            print(f"rank {kv.rank}: epoch {epoch}, val accuracy {acc.asscalar():.3f}", flush=True)
        stats = sw.stats()
    # Local ranks that write share the node's sidecar: the same pid on every rank of a machine.
    sidecar = f", sidecar pid {stats['sidecar_pid']}" if stats["writes"] else ""
    print(f"rank {kv.rank} of {kv.num_workers}: writes={stats['writes']}{sidecar}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--logdir", default="./logs/distributed")
    p.add_argument("--ranks", choices=["zero", "all"], default="zero")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="a few steps only (CI)")
    p.add_argument("--launch-local", type=int, metavar="N", help="start a scheduler, a server and N workers here")
    p.add_argument("--timeout", type=float, default=600, help="with --launch-local: seconds before the job is killed")
    args = p.parse_args()
    if args.launch_local:
        if args.launch_local < 1:
            p.error("--launch-local needs at least one worker")
        argv = ["--logdir", args.logdir, "--ranks", args.ranks, "--epochs", str(args.epochs)]
        code = launch_local(args.launch_local, argv + (["--quick"] if args.quick else []), args.timeout)
        if code == 0:
            print_tensorboard_hint(args.logdir, args.logdir)
        sys.exit(code)
    if "DMLC_ROLE" not in os.environ:
        p.error("run with --launch-local N, or with DMLC_ROLE and the other DMLC_* variables set (see the docstring)")
    train(args)


if __name__ == "__main__":
    main()
