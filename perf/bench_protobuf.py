"""The sidecar's throughput under each protobuf implementation, and the caller's cost
of ``add_scalar(float)`` on each user stack.

    python perf/bench_protobuf.py [--python PY ...] [--quick]

The sidecar is the only process that encodes, so the protobuf it imports decides how
fast it drains: the C runtimes (upb from protobuf 4.21 on, cpp before) or the
pure-Python one (``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``, and the fallback
where no wheel exists).  Each interpreter given (default: this one) is measured twice,
once per implementation, in a child process of its own; per run:

* ``scalars_per_s``: 100,000 Python-float scalars logged back to back with the default
  settings, from the first call to the return of ``close()`` (the queue fills, and the
  caller then waits for the sidecar: this is the sidecar's sustained rate);
* ``sidecar_us_per_scalar``: the sidecar's busy time per scalar (``stats()``);
* ``encode_us_protobuf`` / ``encode_us_bytes``: one scalar event built as protobuf
  objects (what the sidecar did before), and as bytes (``event_bytes``, what it does);
* ``histogram_1M_ms``: the sidecar's busy time for one 1M-value float32 histogram
  (median of 10), which encodes protobuf objects (a few hundred values);
* ``add_scalar_float_p50_us``: the caller's cost, p50 of 20,000 calls with a queue
  large enough never to wait (the training side imports no protobuf: it must not vary).

One JSON line per run.  The training side's cost is measured in the same child, so
figures from two interpreters are comparable only as medians of a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _encode_costs(n: int) -> tuple[float, float]:
    from mxsidecar.formats.proto import event_pb2
    from mxsidecar.sidecar.encoders import scalar

    def with_protobuf(i: int) -> bytes:
        ev = event_pb2.Event(wall_time=1.7e9, step=i)
        ev.summary.value.append(scalar.scalar_pb("train/loss", 0.5))
        return bytes(ev.SerializeToString())

    out = []
    for fn in (with_protobuf, lambda i: scalar.event_bytes(1.7e9, i, "train/loss", 0.5, False)):
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        out.append((time.perf_counter() - t0) / n * 1e6)
    return out[0], out[1]


def measure(quick: bool) -> dict[str, Any]:
    """One run in this process (a child of :func:`main`)."""
    import google.protobuf
    import numpy as np

    from mxsidecar import SidecarWriter
    from mxsidecar.formats.proto import _runtime

    sys.path.insert(0, HERE)
    from common import time_calls

    n_scalars = 20_000 if quick else 100_000
    rec: dict[str, Any] = {
        "bench": "protobuf_stack",
        "python": ".".join(map(str, sys.version_info[:3])),
        "protobuf": google.protobuf.__version__,
        "implementation": _runtime.implementation(),
        "numpy": np.__version__,
    }
    with tempfile.TemporaryDirectory() as logdir:
        w = SidecarWriter(logdir)
        w.flush()  # the sidecar's start-up is not what this measures
        t0 = time.perf_counter()
        for i in range(n_scalars):
            w.add_scalar("loss", 1.0 / (i + 1), i)
        w.flush()
        busy = w.stats()["sidecar"]["busy_seconds"].get("scalar", 0.0)
        w.close()
        rec["scalars_per_s"] = round(n_scalars / (time.perf_counter() - t0))
        rec["sidecar_us_per_scalar"] = round(busy / n_scalars * 1e6, 2)
    with tempfile.TemporaryDirectory() as logdir:
        values = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
        reps = 4 if quick else 10
        per = []
        with SidecarWriter(logdir) as w:
            for i in range(reps):
                before = (w.stats()["sidecar"]["busy_seconds"]).get("histogram", 0.0)
                w.add_histogram("h", values, i)
                w.flush()
                per.append((w.stats()["sidecar"]["busy_seconds"]["histogram"] - before) * 1e3)
        rec["histogram_1M_ms"] = round(statistics.median(per), 2)
    enc_pb, enc_bytes = _encode_costs(5_000 if quick else 50_000)
    rec["encode_us_protobuf"] = round(enc_pb, 2)
    rec["encode_us_bytes"] = round(enc_bytes, 2)
    runs = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as logdir:
            w = SidecarWriter(logdir, max_queue=30_000)
            w.flush()
            runs.append(time_calls(lambda i, log=w.add_scalar: log("loss", 0.5, i), 20_000, w.close)["p50_us"])
    rec["add_scalar_float_p50_us"] = round(statistics.median(runs), 3)
    return rec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--python", nargs="*", default=[sys.executable], help="interpreters to measure in")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.quick), sort_keys=True), flush=True)
        return
    for python in args.python:
        for impl in (None, "python"):
            env = dict(os.environ)
            env.pop("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", None)
            if impl:
                env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = impl
            # This checkout first: an interpreter's own site-packages may hold another mxsidecar.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
            cmd = [python, os.path.abspath(__file__), "--child"] + (["--quick"] if args.quick else [])
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(json.dumps({"bench": "protobuf_stack", "python": python, "error": out.stderr[-2000:]}))
                continue
            sys.stdout.write(out.stdout)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
