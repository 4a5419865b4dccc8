"""An ``s3://`` logdir against a real S3 endpoint (moto's server on 127.0.0.1).

    python perf/bench_remote.py [--seconds 60] [--flush-secs 1]

Needs moto[server] and s3fs (``pip install '.[s3test]'``).  Three lines:

* ``remote_bytes``: a long run (scalars every step, a 1,000-value histogram every 10th,
  for ``--seconds``, sealed every ``--flush-secs``): bytes sent to the store (every PUT
  attempt) over bytes written to the spool's event files, and what rewriting the whole
  growing file at every flush (tensorboardX's and TensorFlow's S3 behaviour) would have sent
  for the same run, from the same files' sizes;
* ``remote_visibility``: seconds from ``add_scalar`` until TensorBoard's own loader,
  reading the ``s3://`` URL, returns the value (no flush(), no close()), p50 and max of a
  few samples;
* ``remote_caller``: the caller's cost of ``add_scalar`` with an ``s3://`` logdir beside a
  local one, timed call by call, interleaved in blocks, flushed between blocks (untimed).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import uuid

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

from common import emit, percentile  # noqa: E402


def _endpoint() -> tuple[object, str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    for k, v in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "S3_ENDPOINT": url,
        "AWS_ENDPOINT_URL": url,
    }.items():
        os.environ[k] = v
    return server, url


def _bucket(endpoint: str) -> str:
    import boto3

    name = "bench-" + uuid.uuid4().hex[:10]
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name


def long_run(endpoint: str, seconds: float, flush_secs: float) -> dict[str, object]:
    import numpy as np

    from mxsidecar import SidecarWriter

    bucket = _bucket(endpoint)
    spool = tempfile.mkdtemp(prefix="mxsidecar-bench-spool-")
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    sw = SidecarWriter(f"s3://{bucket}/run", spool_dir=spool, flush_secs=flush_secs)
    step = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sw.add_scalar("loss", 1.0 / (step + 1), step)
        if step % 10 == 0:
            sw.add_histogram("w", values, step)
        step += 1
        time.sleep(0.001)  # a training step, roughly: the run spans many flush_secs ticks
    sw.flush()  # seals and uploads everything: the sidecar's counters are complete here
    uploads = sw.stats()["sidecar"]["uploads"]
    sw.close()
    files = sorted(os.path.join(spool, n) for n in os.listdir(spool) if "tfevents" in n)
    sizes = [os.path.getsize(p) for p in files]
    written = sum(sizes)
    # What the rewrite-on-flush writers send: the whole file so far, at every tick.
    rewrite = sum(sum(sizes[: k + 1]) for k in range(len(sizes)))
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    stored = sum(o["Size"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="run/").get("Contents", []))
    rec = {
        "bench": "remote_bytes",
        "seconds": seconds,
        "flush_secs": flush_secs,
        "steps": step,
        "files": len(files),
        "bytes_written": written,
        "bytes_stored": stored,
        "bytes_sent": uploads["bytes_sent"],
        "failed_attempts": uploads["failed_attempts"],
        # every PUT attempt, failed ones included, over the bytes of the event files
        "bytes_sent_over_written": round(uploads["bytes_sent"] / written, 4),
        "rewrite_on_flush_over_written": round(rewrite / written, 2),
    }
    emit(rec)
    return rec


def visibility(endpoint: str, flush_secs: float, samples: int = 5) -> dict[str, object]:
    from tensorboard.backend.event_processing import event_accumulator

    from mxsidecar import SidecarWriter

    bucket = _bucket(endpoint)
    url = f"s3://{bucket}/run"
    lags = []
    with SidecarWriter(url, spool_dir=tempfile.mkdtemp(prefix="mxsidecar-bench-spool-"), flush_secs=flush_secs) as sw:
        for k in range(samples):
            time.sleep(flush_secs * (0.3 + 0.13 * k))  # land at different points of the tick
            t0 = time.monotonic()
            sw.add_scalar("probe", float(k), k)
            while True:
                acc = event_accumulator.EventAccumulator(url, size_guidance={"tensors": 0})
                acc.Reload()
                if "probe" in acc.Tags()["tensors"] and any(e.step == k for e in acc.Tensors("probe")):
                    break
                time.sleep(0.05)
            lags.append(time.monotonic() - t0)
    s = sorted(lags)
    rec = {
        "bench": "remote_visibility",
        "flush_secs": flush_secs,
        "samples": samples,
        "p50_s": round(percentile(s, 50), 3),
        "max_s": round(s[-1], 3),
    }
    emit(rec)
    return rec


def caller(endpoint: str, n: int = 20_000, block: int = 500) -> list[dict[str, object]]:
    from mxsidecar import SidecarWriter

    bucket = _bucket(endpoint)
    writers = {
        "s3": SidecarWriter(
            f"s3://{bucket}/run", spool_dir=tempfile.mkdtemp(prefix="mxsidecar-bench-spool-"), flush_secs=1
        ),
        "local": SidecarWriter(tempfile.mkdtemp(prefix="mxsidecar-bench-local-"), flush_secs=1),
    }
    clock = time.perf_counter_ns
    samples: dict[str, list[int]] = {k: [] for k in writers}
    for start in range(0, n, block):  # interleaved blocks: both see the same machine
        for name, w in writers.items():
            w.flush()
            for i in range(start, start + block):
                t0 = clock()
                w.add_scalar("loss", 0.5, i)
                samples[name].append(clock() - t0)
    for w in writers.values():
        w.close()
    out = []
    for name, s in samples.items():
        s.sort()
        rec = {
            "bench": "remote_caller",
            "logdir": name,
            "call": "add_scalar_float",
            "n": n,
            "p50_us": round(percentile(s, 50) / 1e3, 3),
            "p90_us": round(percentile(s, 90) / 1e3, 3),
            "p99_us": round(percentile(s, 99) / 1e3, 3),
        }
        emit(rec)
        out.append(rec)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--flush-secs", type=float, default=1.0)
    args = p.parse_args()
    server, endpoint = _endpoint()
    try:
        long_run(endpoint, args.seconds, args.flush_secs)
        visibility(endpoint, args.flush_secs)
        caller(endpoint)
    finally:
        server.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
