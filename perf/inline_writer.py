"""A minimal synchronous inline writer, the way mxboard works: the reference point for
``bench_steptime.py``.

Everything happens in the caller's thread, at the call: ``asnumpy()`` / ``asscalar()``
of an NDArray (which waits for it and for everything it depends on), the histogram
(``np.histogram`` over TensorFlow's 1,548 default buckets, as mxboard's
``_make_histogram``), the image grid and its PNG (Pillow, default compression; a
one-channel image tripled into RGB, as mxboard's ``make_image_grid`` does), the
protobuf (``mxsidecar.formats.proto``), the TFRecord framing (``mxsidecar.formats.records.frame``) and
the ``write`` into a buffered event file, flushed at :meth:`close`.

``add_audio`` (a WAV by the ``wave`` module, mxboard's way), ``add_text`` (the text
plugin's string tensor) and ``add_embedding`` (``tensors.tsv``, ``metadata.tsv``, a
sprite PNG and the projector config, written at the call) complete the kinds the
caller-cost benchmarks time.  Only these, ``flush`` and ``close`` are here, with
:class:`~mxsidecar.SidecarWriter`'s names and arguments, so a benchmark can swap one
writer for the other.  Not for use outside ``perf/``.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import socket
import time
import wave
from types import TracebackType
from typing import Any

import numpy as np

from mxsidecar.formats.proto import event_pb2, histogram_pb2, plugin_text_pb2, projector_config_pb2, summary_pb2
from mxsidecar.formats.records import frame

__all__ = ["DEFAULT_BINS", "InlineWriter"]


def _default_bins() -> np.ndarray[Any, Any]:
    """TensorFlow's bucket edges (mxboard's ``_get_default_bins``): +-1e-12 * 1.1**k up to 1e20, and 0."""
    pos, v = [], 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    p = np.array(pos)
    return np.concatenate([-p[::-1], [0.0], p])


DEFAULT_BINS = _default_bins()  # 1549 edges, 1548 buckets
_files = itertools.count()


def _host(value: Any) -> np.ndarray[Any, Any]:
    """Host values of an NDArray (a sync, as in mxboard), or the numpy array itself."""
    if hasattr(value, "asnumpy"):
        out: np.ndarray[Any, Any] = value.asnumpy()
        return out
    return np.asarray(value)


class InlineWriter:
    """Histogram, PNG, protobuf and file write in the caller, at each call.

    Parameters
    ----------
    logdir : str
        Directory of the event file; created if missing.
    buffer_bytes : int
        Size of the file's write buffer; records reach the file when it fills and at
        :meth:`flush` / :meth:`close`.
    """

    def __init__(self, logdir: str, buffer_bytes: int = 1 << 20) -> None:
        os.makedirs(logdir, exist_ok=True)
        self._logdir = logdir
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.inline{next(_files)}"
        self._file = open(os.path.join(logdir, name), "wb", buffering=buffer_bytes)
        first = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        self._file.write(frame(first.SerializeToString()))

    def _write(self, value: summary_pb2.Summary.Value, global_step: int | None, walltime: float | None) -> None:
        ev = event_pb2.Event(wall_time=time.time() if walltime is None else walltime, step=global_step or 0)
        ev.summary.value.append(value)
        self._file.write(frame(ev.SerializeToString()))

    def add_scalar(self, tag: str, value: Any, global_step: int | None = None, walltime: float | None = None) -> None:
        """A ``simple_value`` scalar (mxboard's form); an NDArray is ``asscalar()``-ed here."""
        number = float(value.asscalar()) if hasattr(value, "asscalar") else float(value)
        self._write(summary_pb2.Summary.Value(tag=tag, simple_value=number), global_step, walltime)

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "default",
        walltime: float | None = None,
    ) -> None:
        """mxboard's ``_make_histogram``: ``np.histogram`` over the default edges, every bucket kept."""
        x = _host(values).reshape(-1)
        counts, limits = np.histogram(x, bins=DEFAULT_BINS if isinstance(bins, str) else bins)
        proto = histogram_pb2.HistogramProto(
            min=float(x.min()),
            max=float(x.max()),
            num=float(x.size),
            sum=float(x.sum()),
            sum_squares=float(x.dot(x)),
            bucket_limit=limits[1:].tolist(),
            bucket=counts.tolist(),
        )
        value = summary_pb2.Summary.Value(tag=tag)
        value.histo.CopyFrom(proto)
        self._write(value, global_step, walltime)

    def add_image(
        self,
        tag: str,
        image: Any,
        global_step: int | None = None,
        dataformats: str | None = None,
        walltime: float | None = None,
    ) -> None:
        """CHW / HWC / HW / NCHW / NHWC (by rank if None: HW, CHW, NCHW); float in [0, 1] or uint8."""
        from PIL import Image

        x = _host(image)
        fmt = dataformats or {2: "HW", 3: "CHW", 4: "NCHW"}[x.ndim]
        x = {"HW": lambda a: a[None, :, :, None], "HWC": lambda a: a[None], "CHW": lambda a: a.transpose(1, 2, 0)[None],
             "NCHW": lambda a: a.transpose(0, 2, 3, 1), "NHWC": lambda a: a}[fmt](x)  # fmt: skip
        if x.dtype != np.uint8:
            x = (x * 255).clip(0, 255).astype(np.uint8)
        if x.shape[3] == 1:
            x = np.repeat(x, 3, axis=3)  # mxboard makes gray images RGB
        n, h, w, c = x.shape
        if n == 1:
            grid = x[0]
        else:
            cols = math.ceil(math.sqrt(n))
            rows = math.ceil(n / cols)
            grid = np.zeros((rows * (h + 2) + 2, cols * (w + 2) + 2, c), dtype=np.uint8)
            for k in range(n):
                top, left = 2 + (k // cols) * (h + 2), 2 + (k % cols) * (w + 2)
                grid[top : top + h, left : left + w] = x[k]
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(grid)).save(buf, format="PNG")  # Pillow's default level, as mxboard
        value = summary_pb2.Summary.Value(tag=tag)
        im = value.image
        im.height, im.width, im.colorspace = grid.shape[0], grid.shape[1], grid.shape[2]
        im.encoded_image_string = buf.getvalue()
        self._write(value, global_step, walltime)

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        self.add_image(tag, img_tensor, global_step, dataformats, walltime)

    def add_audio(self, tag: str, audio: Any, sample_rate: int = 44100, global_step: int | None = None) -> None:
        """Mono 16-bit WAV of values in [-1, 1]."""
        x = (np.clip(_host(audio).reshape(-1), -1, 1) * 32767).astype("<i2")
        buf = io.BytesIO()
        with wave.open(buf, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(sample_rate)
            wav.writeframes(x.tobytes())
        value = summary_pb2.Summary.Value(tag=tag)
        value.audio.sample_rate = sample_rate
        value.audio.num_channels = 1
        value.audio.length_frames = x.size
        value.audio.content_type = "audio/wav"
        value.audio.encoded_audio_string = buf.getvalue()
        self._write(value, global_step, None)

    def add_text(self, tag: str, text: str, global_step: int | None = None) -> None:
        """The text plugin's rank-0 string tensor."""
        value = summary_pb2.Summary.Value(tag=tag)
        value.metadata.plugin_data.plugin_name = "text"
        value.metadata.plugin_data.content = plugin_text_pb2.TextPluginData(version=0).SerializeToString()
        value.tensor.dtype = 7  # DT_STRING
        value.tensor.string_val.append(text.encode())
        self._write(value, global_step, None)

    def add_embedding(
        self,
        tag: str,
        embedding: Any,
        labels: Any = None,
        images: Any = None,
        global_step: int | None = None,
    ) -> None:
        """The projector's files in ``<logdir>/<tag>_<step>/``, written in the caller as mxboard does."""
        from PIL import Image

        d = os.path.join(self._logdir, f"{tag}_{global_step or 0:06d}")
        os.makedirs(d, exist_ok=True)
        np.savetxt(os.path.join(d, "tensors.tsv"), _host(embedding), fmt="%g", delimiter="\t")
        proj = projector_config_pb2.ProjectorConfig()
        emb = proj.embeddings.add(tensor_name=tag, tensor_path=os.path.join(os.path.basename(d), "tensors.tsv"))
        if labels is not None:
            with open(os.path.join(d, "metadata.tsv"), "w") as f:
                f.write("".join(f"{label}\n" for label in labels))
            emb.metadata_path = os.path.join(os.path.basename(d), "metadata.tsv")
        if images is not None:
            x = _host(images)  # N x C x H x W in [0, 1]
            n, c, h, w = x.shape
            side = math.ceil(math.sqrt(n))
            sprite = np.zeros((side * h, side * w, c), dtype=np.uint8)
            tiles = (x.transpose(0, 2, 3, 1) * 255).clip(0, 255).astype(np.uint8)
            for k in range(n):
                sprite[(k // side) * h : (k // side + 1) * h, (k % side) * w : (k % side + 1) * w] = tiles[k]
            Image.fromarray(sprite[:, :, 0] if c == 1 else sprite).save(os.path.join(d, "sprite.png"))
            emb.sprite.image_path = os.path.join(os.path.basename(d), "sprite.png")
            emb.sprite.single_image_dim.extend([w, h])
        with open(os.path.join(self._logdir, "projector_config.pbtxt"), "a") as f:
            from google.protobuf import text_format

            f.write(text_format.MessageToString(proj))

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            self._file.close()

    def __enter__(self) -> InlineWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
