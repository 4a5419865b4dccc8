"""Audio: the legacy ``Summary.Audio`` holding a 16-bit PCM WAV, which both loaders read.

Contract (TensorBoard ``plugins/audio/metadata.py``): plugin ``audio``, content an
``AudioPluginData{version: 0, encoding: WAV (11)}``, data class BLOB_SEQUENCE.  We write
``Value.audio`` (``sample_rate``, ``num_channels``, ``length_frames``,
``encoded_audio_string``, ``content_type "audio/wav"``), and unlike images *with* that
metadata, because the two loaders disagree on what a bare legacy clip is:

* the Python loader (``data_compat._migrate_audio_value``) turns it into the ``[1, 2]``
  DT_STRING tensor ``[[wav, b""]]`` with metadata of its own making, ``encoding: WAV``,
  and ignores ours;
* the Rust data server (``--load_fast``, TensorBoard's default where available) keeps
  the WAV as a one-blob sequence, but for a value without metadata synthesises
  ``AudioPluginData`` with no ``encoding``, so the Audio tab serves the clip as
  ``application/octet-stream`` instead of ``audio/wav`` (measured with tensorboard 2.21
  / tensorboard-data-server 0.7.2).  Metadata that sets a data class it takes verbatim,
  so ours restores ``audio/wav`` there.

Neither loader carries ``sample_rate`` or ``num_channels`` on: the browser plays the WAV
header, so the header is what must be right.  TensorBoard keeps 10 clips per tag.

Conversions (the array arrives in the caller's shape; the writer has checked it and
says in ``options["layout"]`` how it read it, see ``validate.audio_layout``):

* dimensions of size 1 are dropped, as the writer's check dropped them; what remains is
  ``[frames]`` (mono) or, by ``layout``, ``[frames, channels]`` (``"frames"``, the
  default) or ``[channels, frames]`` (``"channels_first"``), with 1 or 2 channels,
  interleaved in the WAV frame by frame.
* int16 is taken as is; float16/32/64 must lie in [-1, 1] (else ValueError, NaN
  included) and becomes ``rint(x * 32767)``: symmetric, so -1 and 1 map to -32767 and
  32767 and silence stays exactly 0 (scaling by 32768 would need a clip at +1).
  Other dtypes are refused: an int32 clip's full scale is a guess.
* the sample rate must be a positive integer (the WAV header has no fractional rate;
  rounding it silently would change the pitch and length the caller asked for).

The WAV is written by the stdlib ``wave`` module, samples explicitly little-endian
(``<i2``) as RIFF requires, whatever the host's byte order.
"""

from __future__ import annotations

import io
import numbers
import wave
from typing import Any

import numpy as np

from ...formats.proto import plugin_audio_pb2, summary_pb2
from ...wire.descriptors import Descriptor
from . import Encoded
from .image import scale_float

PLUGIN_NAME = "audio"
PROTO_VERSION = 0
CONTENT_TYPE = "audio/wav"
_MAX_RATE = 2**32 - 1  # the RIFF header's field is a u32

__all__ = [
    "PLUGIN_NAME",
    "PROTO_VERSION",
    "as_frames",
    "audio_pb",
    "create_summary_metadata",
    "encode",
    "to_int16_frames",
    "wav_bytes",
]


def create_summary_metadata() -> summary_pb2.SummaryMetadata:
    """The audio plugin's metadata, attached (by the sidecar, once per tag and file) to our legacy values."""
    content = plugin_audio_pb2.AudioPluginData(version=PROTO_VERSION, encoding=plugin_audio_pb2.AudioPluginData.WAV)
    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_BLOB_SEQUENCE)
    md.plugin_data.plugin_name = PLUGIN_NAME
    md.plugin_data.content = content.SerializeToString()
    return md


METADATA = create_summary_metadata()


def check_sample_rate(sample_rate: Any) -> int:
    """``sample_rate`` as an int, or ValueError; integral floats (JSON round trips) pass."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, numbers.Real):
        raise ValueError(f"sample_rate must be a positive integer, got {sample_rate!r}")
    rate = float(sample_rate)
    if not (0 < rate <= _MAX_RATE) or not rate.is_integer():
        raise ValueError(f"sample_rate must be a positive integer up to {_MAX_RATE}, got {sample_rate!r}")
    return int(rate)


def as_frames(data: np.ndarray[Any, Any], layout: str = "frames") -> np.ndarray[Any, Any]:
    """The caller's array as ``[frames]`` or ``[frames, channels]`` (a view: reshape and transpose only)."""
    if layout not in ("frames", "channels_first"):
        raise ValueError(f"audio layout must be 'frames' or 'channels_first', got {layout!r}")
    x = data.reshape([d for d in data.shape if d != 1] or [data.size])
    if layout == "channels_first" and x.ndim == 2:
        x = x.T
    return x


def to_int16_frames(data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``[frames]`` or ``[frames, channels]`` audio -> ``[frames, channels]`` int16 (maybe a view)."""
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2 or data.shape[1] not in (1, 2):
        raise ValueError(f"audio must be [frames] or [frames, 1 or 2 channels], got shape {data.shape}")
    if data.dtype == np.int16:
        if data.size == 0:
            raise ValueError(f"audio is empty (shape {data.shape})")
        return data
    if data.dtype.kind != "f":
        raise ValueError(f"audio must be float in [-1, 1] or int16, got {data.dtype}")
    # in [-32767, 32767] once checked: the cast cannot wrap
    return scale_float(data, 32767.0, -1.0, "audio").astype(np.int16)


def wav_bytes(frames: np.ndarray[Any, Any], sample_rate: int) -> bytes:
    """A 16-bit PCM WAV of ``[frames, channels]`` int16 samples."""
    if frames.ndim != 2 or frames.dtype != np.int16:
        raise ValueError(f"expected [frames, channels] int16, got {frames.dtype} {frames.shape}")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(frames.shape[1])
        w.setsampwidth(2)
        w.setframerate(check_sample_rate(sample_rate))
        # tobytes() emits C order whatever the strides: frame after frame, channels interleaved
        w.writeframes(frames.astype("<i2", copy=False).tobytes())
    return buf.getvalue()


def audio_pb(tag: str, frames: np.ndarray[Any, Any], sample_rate: int) -> summary_pb2.Summary.Value:
    """The legacy audio value of ``[frames, channels]`` int16 samples."""
    v = summary_pb2.Summary.Value(tag=tag)
    au = v.audio
    au.sample_rate = float(sample_rate)
    au.num_channels = frames.shape[1]
    au.length_frames = frames.shape[0]
    au.encoded_audio_string = wav_bytes(frames, sample_rate)
    au.content_type = CONTENT_TYPE
    return v


def encode(desc: Descriptor, data: Any) -> list[Encoded]:
    options = desc.options or {}
    sample_rate = check_sample_rate(options.get("sample_rate"))
    frames = to_int16_frames(as_frames(data, options.get("layout", "frames")))
    return [Encoded(desc.run, audio_pb(desc.tag, frames, sample_rate), METADATA)]
