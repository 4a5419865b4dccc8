"""Caller cost of every array kind on an NDArray, and of text, beside tensorboardX, the
inline writer and mxboard in the same run; and the sidecar's own time for a 1M-value
histogram beside numpy's.

Each call is timed on its own; every 10 calls the writer is flushed (untimed in the
percentiles) so the sidecar's backlog never makes a call wait: the percentiles are
the training thread's cost, not the sidecar's throughput.  ``mean_incl_close_us``
charges the calls, the flushes and ``close()`` to the calls.  tensorboardX gets
``asnumpy()`` of the same NDArray (it cannot take one), so its figures include that
sync plus its encoding; the inline writer and mxboard take the NDArray and sync
inside.  mxsidecar gets ``slab_mb=256``, so that ten embeddings fit between flushes.
mxboard has no ``add_images``: its ``add_image`` takes the batch.  mxboard
runs in its own environment (``mxboard_env``), one worker per case and repeat.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_scalar import WRITERS
from common import emit, interleave, percentile, time_flushed, worker_result

__all__ = ["CASES", "run", "sidecar_histogram"]

Call = Callable[[Any, dict[str, Any], int], Any]
TEXT = "**epoch 3** | loss `0.4213` | accuracy 91.2 %\n\n| layer | grad norm |\n|---|---|\n| fc1 | 0.031 |\n"

# case -> writer -> the call on the case's values; "" is the call for a writer that takes
# SidecarWriter's (mxboard's) signature and NDArrays as they are
CASES: dict[str, dict[str, Call]] = {
    "add_image_3x224x224": {
        "": lambda w, v, i: w.add_image("img", v["image"], i),
        "tensorboardX": lambda w, v, i: w.add_image("img", v["image"].asnumpy(), i),
    },
    "add_images_16x3x64x64": {
        "": lambda w, v, i: w.add_images("batch", v["batch"], i),
        "tensorboardX": lambda w, v, i: w.add_images("batch", v["batch"].asnumpy(), i),
        "mxboard": lambda w, v, i: w.add_image("batch", v["batch"], i),
    },
    "add_audio_1s_44k1": {
        "": lambda w, v, i: w.add_audio("snd", v["audio"], 44100, i),
        "tensorboardX": lambda w, v, i: w.add_audio("snd", v["audio"].asnumpy(), i, sample_rate=44100),
    },
    "add_text": {
        "": lambda w, v, i: w.add_text("notes", TEXT, i),
    },
    "add_histogram_1M": {
        "": lambda w, v, i: w.add_histogram("w", v["hist"], i),
        "tensorboardX": lambda w, v, i: w.add_histogram("w", v["hist"].asnumpy(), i),
    },
    "add_embedding_2000x128_labels_sprite": {
        "": lambda w, v, i: w.add_embedding("emb", v["emb"], labels=v["labels"], images=v["thumbs"], global_step=i),
        "tensorboardX": lambda w, v, i: w.add_embedding(
            v["emb"].asnumpy(), metadata=v["labels"], label_img=v["thumbs"].asnumpy(), global_step=i
        ),
    },
}
SLOW = ("tensorboardX", "inline", "mxboard")  # embeddings take them a second: fewer calls


def _values() -> dict[str, Any]:
    import mxnet as mx

    rng = np.random.default_rng(0)
    values = {
        "image": mx.nd.array(rng.random((3, 224, 224)), dtype="float32"),
        "batch": mx.nd.array(rng.random((16, 3, 64, 64)), dtype="float32"),
        "audio": mx.nd.array(np.sin(np.linspace(0, 2000, 44100)) * 0.5, dtype="float32"),
        "hist": mx.nd.array(rng.standard_normal(1_000_000), dtype="float32"),
        "emb": mx.nd.array(rng.random((2000, 128)), dtype="float32"),
        "thumbs": mx.nd.array(rng.random((2000, 1, 28, 28)), dtype="float32"),
        "labels": [str(i % 10) for i in range(2000)],
    }
    mx.nd.waitall()
    return values


def _sidecar_writer(logdir: str) -> Any:
    from mxsidecar import SidecarWriter

    return SidecarWriter(logdir, slab_mb=256)


def _once(case: str, name: str, n: int) -> dict[str, Any]:
    """One writer's timed run of ``case``: the per-call samples and what was charged."""
    values = _values()
    call = CASES[case].get(name, CASES[case][""])
    with tempfile.TemporaryDirectory() as logdir:
        # mxsidecar's arena holds ten embeddings (7.4 MB each) between flushes
        w = WRITERS[name](logdir) if name != "mxsidecar" else _sidecar_writer(logdir)
        return time_flushed(w, lambda _, i: call(w, values, i), n)


def run(n: int = 30, repeats: int = 3, writers: tuple[str, ...] = tuple(WRITERS)) -> list[dict[str, Any]]:
    records = []
    skipped: set[str] = set()
    for case in CASES:

        def args(name: str, case: str = case) -> tuple[str, str, int]:
            return case, name, max(3, n // 10) if name in SLOW and "embedding" in case else n

        runs = interleave(case, writers, repeats, "bench_kinds", _once, args, skipped)
        samples = {name: [x for r in rs for x in r["samples"]] for name, rs in runs.items()}
        means = {name: [r["charged_ns"] / len(r["samples"]) / 1e3 for r in rs] for name, rs in runs.items()}
        closes = {name: [r["close_ms"] for r in rs] for name, rs in runs.items()}
        for name, ss in samples.items():
            if not ss:
                continue
            s = sorted(ss)
            rec = {
                "bench": case,
                "writer": name,
                "n": len(s),
                "p50_us": round(percentile(s, 50) / 1e3, 2),
                "p90_us": round(percentile(s, 90) / 1e3, 2),
                "p99_us": round(percentile(s, 99) / 1e3, 2),
                "mean_incl_close_us": round(statistics.median(means[name]), 2),
                "close_ms": round(statistics.median(closes[name]), 2),
            }
            emit(rec)
            records.append(rec)
    return records


def sidecar_histogram(repeats: int = 15) -> list[dict[str, Any]]:
    """The sidecar's encode of a 1M float32 histogram beside numpy's float32 np.histogram."""
    from mxsidecar.sidecar.encoders.histogram import TF_LIMITS, histogram_pb

    x = np.random.default_rng(1).standard_normal(1_000_000).astype(np.float32)
    edges = TF_LIMITS.astype(np.float32)
    cases = {
        "mxsidecar histogram_pb(bins='default')": lambda: histogram_pb(x),
        "mxsidecar histogram_pb(bins=30)": lambda: histogram_pb(x, 30),
        "numpy np.histogram(x, bins=30)": lambda: np.histogram(x, bins=30),
        "numpy np.histogram(x) (10 bins)": lambda: np.histogram(x),
        "numpy np.histogram(x, TensorBoard's 1549 edges)": lambda: np.histogram(x, bins=edges),
    }
    records = _against_numpy("sidecar_histogram_1M_float32", cases, "numpy np.histogram(x, bins=30)", repeats, 2)
    return records + _heavy_step_histograms(repeats * 4)


def _against_numpy(
    bench: str, cases: dict[str, Callable[[], Any]], base: str, repeats: int, digits: int
) -> list[dict[str, Any]]:
    """Each case timed ``repeats`` times, interleaved; one record per case: its median
    and its ratio to the median of case ``base``."""
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for k, f in cases.items():  # interleaved
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    floor = statistics.median(times[base])
    records = []
    for k, ts in times.items():
        rec = {"bench": bench, "what": k, "median_ms": round(statistics.median(ts) * 1e3, digits),
               "ratio_to_np_histogram_30": round(statistics.median(ts) / floor, 2)}  # fmt: skip
        emit(rec)
        records.append(rec)
    return records


# The parameters of bench_steptime's CNN (conv 32x1x3x3, conv 64x32x3x3, dense 1600->128,
# dense 128->10, each with its bias): its heavy profile logs each one's weight and
# gradient, 16 histograms and 450k values a step, 12 of them under 2,000 values.
HEAVY_STEP_SIZES = (288, 32, 18432, 64, 204800, 128, 1280, 10)


def _heavy_step_histograms(repeats: int) -> list[dict[str, Any]]:
    """The sidecar's histograms of one heavy-profile step (``histogram_encode_heavy_step``):
    ``encode`` of each descriptor, as the sidecar runs it, beside np.histogram(a, 30) of
    the same 16 arrays."""
    from mxsidecar.sidecar.encoders import histogram
    from mxsidecar.wire.descriptors import Descriptor, Kind, Op

    rng = np.random.default_rng(2)
    arrays = [(rng.standard_normal(n) * scale).astype(np.float32) for n in HEAVY_STEP_SIZES for scale in (0.05, 1e-3)]
    desc = Descriptor(Op.ITEM, 1, Kind.HISTOGRAM, "w", 1, 0.0)
    cases = {
        "mxsidecar encoders.histogram.encode, 16 arrays": lambda: [histogram.encode(desc, a) for a in arrays],
        "numpy np.histogram(a, bins=30), 16 arrays": lambda: [np.histogram(a, bins=30) for a in arrays],
    }
    return _against_numpy("histogram_encode_heavy_step", cases, "numpy np.histogram(a, bins=30), 16 arrays", repeats, 3)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--worker"]:  # mxboard_env.run_worker: one run of one writer
        worker_result(_once(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        import os

        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        sidecar_histogram()
        if "--histograms" not in sys.argv[1:]:  # --histograms: the sidecar's histograms only
            run()
