"""Caller cost of every array kind on an NDArray, beside tensorboardX in the same run,
and the sidecar's own time for a 1M-value histogram beside numpy's.

Each call is timed on its own; every 10 calls the writer is flushed (untimed) so the
sidecar's backlog never makes a call wait: these figures are the training thread's
cost, not the sidecar's throughput.  tensorboardX gets ``asnumpy()`` of the same
NDArray (it cannot take one), so its figures include that sync plus its encoding.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import emit, percentile

__all__ = ["run", "sidecar_histogram"]


def _cases(mx: Any) -> dict[str, tuple[Callable[[Any, Any, int], Any], Callable[[Any, Any, int], Any], Any]]:
    rng = np.random.default_rng(0)
    image = mx.nd.array(rng.random((3, 224, 224)), dtype="float32")
    batch = mx.nd.array(rng.random((16, 3, 64, 64)), dtype="float32")
    audio = mx.nd.array(np.sin(np.linspace(0, 2000, 44100)) * 0.5, dtype="float32")
    hist = mx.nd.array(rng.standard_normal(1_000_000), dtype="float32")
    emb = mx.nd.array(rng.random((2000, 128)), dtype="float32")
    thumbs = mx.nd.array(rng.random((2000, 1, 28, 28)), dtype="float32")
    labels = [str(i % 10) for i in range(2000)]
    mx.nd.waitall()
    return {
        "add_image_3x224x224": (
            lambda w, x, i: w.add_image("img", x, i),
            lambda w, x, i: w.add_image("img", x.asnumpy(), i),
            image,
        ),
        "add_images_16x3x64x64": (
            lambda w, x, i: w.add_images("batch", x, i),
            lambda w, x, i: w.add_images("batch", x.asnumpy(), i),
            batch,
        ),
        "add_audio_1s_44k1": (
            lambda w, x, i: w.add_audio("snd", x, 44100, i),
            lambda w, x, i: w.add_audio("snd", x.asnumpy(), i, sample_rate=44100),
            audio,
        ),
        "add_histogram_1M": (
            lambda w, x, i: w.add_histogram("w", x, i),
            lambda w, x, i: w.add_histogram("w", x.asnumpy(), i),
            hist,
        ),
        "add_embedding_2000x128_labels_sprite": (
            lambda w, x, i: w.add_embedding("emb", x, labels=labels, images=thumbs, global_step=i),
            lambda w, x, i: w.add_embedding(x.asnumpy(), metadata=labels, label_img=thumbs.asnumpy(), global_step=i),
            emb,
        ),
    }


def run(n: int = 30, repeats: int = 3) -> list[dict[str, Any]]:
    import mxnet as mx

    from mxsidecar import SidecarWriter

    try:
        from tensorboardX import SummaryWriter as TBX
    except ImportError:
        TBX = None
    records = []
    for bench, (ours, theirs, value) in _cases(mx).items():
        results: dict[str, list[float]] = {"mxsidecar": [], "tensorboardX": []}
        for _ in range(repeats):
            for name in ("mxsidecar", "tensorboardX"):
                if name == "tensorboardX" and TBX is None:
                    continue
                with tempfile.TemporaryDirectory() as logdir:
                    w = SidecarWriter(logdir, slab_mb=256) if name == "mxsidecar" else TBX(logdir)
                    call = ours if name == "mxsidecar" else theirs
                    n_here = n if name == "mxsidecar" or "embedding" not in bench else max(3, n // 10)
                    for i in range(n_here):
                        t0 = time.perf_counter_ns()
                        call(w, value, i)
                        results[name].append(time.perf_counter_ns() - t0)
                        if i % 10 == 9:
                            w.flush()
                    w.close()
        for name, samples in results.items():
            if not samples:
                continue
            s = sorted(samples)
            rec = {
                "bench": bench,
                "writer": name,
                "n": len(s),
                "p50_us": round(percentile(s, 50) / 1e3, 2),
                "p90_us": round(percentile(s, 90) / 1e3, 2),
                "p99_us": round(percentile(s, 99) / 1e3, 2),
            }
            emit(rec)
            records.append(rec)
    return records


def sidecar_histogram(repeats: int = 15) -> list[dict[str, Any]]:
    """The sidecar's encode of a 1M float32 histogram beside numpy's float32 np.histogram."""
    from mxsidecar.encoders.histogram import TF_LIMITS, histogram_pb

    x = np.random.default_rng(1).standard_normal(1_000_000).astype(np.float32)
    edges = TF_LIMITS.astype(np.float32)
    cases = {
        "mxsidecar histogram_pb(bins='default')": lambda: histogram_pb(x),
        "mxsidecar histogram_pb(bins=30)": lambda: histogram_pb(x, 30),
        "numpy np.histogram(x, bins=30)": lambda: np.histogram(x, bins=30),
        "numpy np.histogram(x) (10 bins)": lambda: np.histogram(x),
        "numpy np.histogram(x, TensorBoard's 1549 edges)": lambda: np.histogram(x, bins=edges),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for k, f in cases.items():  # interleaved
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["numpy np.histogram(x, bins=30)"])
    records = []
    for k, ts in times.items():
        rec = {"bench": "sidecar_histogram_1M_float32", "what": k, "median_ms": round(statistics.median(ts) * 1e3, 2),
               "ratio_to_np_histogram_30": round(statistics.median(ts) / base, 2)}  # fmt: skip
        emit(rec)
        records.append(rec)
    return records


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sidecar_histogram()
    run()
