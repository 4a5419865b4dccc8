"""Image, audio and video encoders: pure functions checked pixel- and sample-exactly.

Expected images are built here by explicit per-cell placement, not by the encoder's
``make_grid``, so a layout bug cannot agree with itself.  Encoded bytes are decoded
with Pillow and ``wave``; one value of each kind also goes through TensorBoard's own
legacy migration (``data_compat.migrate_value``), the loader's view of what we wrote.
"""

from __future__ import annotations

import io
import math
import wave
from typing import Any

import numpy as np
import pytest
from conftest import gif_durations_ms
from PIL import Image

from mxsidecar.formats.proto import plugin_audio_pb2, plugin_image_pb2, summary_pb2
from mxsidecar.sidecar.encoders import audio, image, video
from mxsidecar.wire.descriptors import Descriptor, Kind, Op

RNG = np.random.default_rng(1234)
FLOATS = [np.float16, np.float32, np.float64]


def desc(kind: Kind, options: dict[str, Any] | None, tag: str = "t", run: str = "") -> Descriptor:
    return Descriptor(Op.ITEM, 7, kind, tag, step=3, run=run, options=options)


def expected_grid(batch: np.ndarray) -> np.ndarray:
    """Oracle for the grid layout: (N, H, W, C) -> padded grid, written cell by cell."""
    n, h, w, c = batch.shape
    if n == 1:
        return batch[0]
    ncols = math.ceil(math.sqrt(n))
    nrows = math.ceil(n / ncols)
    out = np.zeros((nrows * (h + 2) + 2, ncols * (w + 2) + 2, c), np.uint8)
    for k in range(n):
        r, q = divmod(k, ncols)
        out[2 + r * (h + 2) : 2 + r * (h + 2) + h, 2 + q * (w + 2) : 2 + q * (w + 2) + w] = batch[k]
    return out


def in_format(nhwc: np.ndarray, dataformats: str) -> np.ndarray:
    """Lay out an (N, H, W, C) batch as ``dataformats`` would hold it (a fresh array)."""
    x = {
        "NHWC": nhwc,
        "NCHW": nhwc.transpose(0, 3, 1, 2),
        "HWC": nhwc[0],
        "CHW": nhwc[0].transpose(2, 0, 1),
        "HW": nhwc[0, :, :, 0],
    }[dataformats]
    return np.ascontiguousarray(x)


def as_dtype(u8: np.ndarray, dtype: Any) -> np.ndarray:
    return u8 if dtype == np.uint8 else (u8 / 255.0).astype(dtype)


def decode_png(value: summary_pb2.Summary.Value) -> tuple[Image.Image, np.ndarray]:
    im = Image.open(io.BytesIO(value.image.encoded_image_string))
    assert im.format == "PNG"
    arr = np.asarray(im)
    return im, arr if arr.ndim == 3 else arr[:, :, None]


# --------------------------------------------------------------------------- images


@pytest.mark.parametrize("dtype", [np.uint8, *FLOATS])
@pytest.mark.parametrize(
    ("dataformats", "channels"),
    [(f, c) for f in ("CHW", "HWC", "NCHW", "NHWC") for c in (1, 3, 4)] + [("HW", 1)],
)
def test_image_round_trip_pixel_exact(dataformats: str, channels: int, dtype: Any) -> None:
    n = 5 if dataformats.startswith("N") else 1
    ref = RNG.integers(0, 256, (n, 6, 9, channels), dtype=np.uint8)
    data = as_dtype(in_format(ref, dataformats), dtype)
    before = data.copy()

    (enc,) = image.encode(desc(Kind.IMAGE, {"dataformats": dataformats}, run="r1"), data)

    assert enc.run == "r1" and enc.metadata is None and enc.value.tag == "t"
    want = expected_grid(ref)
    im, got = decode_png(enc.value)
    assert im.mode == {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    np.testing.assert_array_equal(got, want)
    assert (enc.value.image.height, enc.value.image.width) == want.shape[:2]
    assert enc.value.image.colorspace == channels
    np.testing.assert_array_equal(data, before)  # the shared-memory view is never written


# torchvision's (and mxboard's) make_grid layout as documented: ceil(sqrt(N)) columns,
# as many rows as needed.  Written out, not computed: the encoder computes it.
GRID_ROWS_COLS = {2: (1, 2), 3: (2, 2), 4: (2, 2), 5: (2, 3), 7: (3, 3), 9: (3, 3), 10: (3, 4), 16: (4, 4), 17: (4, 5)}

# Five 1x1 images valued 1..5: 2 px of black around and between the cells, the last
# row's unused cell black too (8 = 2 * 3 + 2 rows, 11 = 3 * 3 + 2 columns).
GRID_OF_FIVE = np.array(
    [
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 4, 0, 0, 5, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ],
    dtype=np.uint8,
)[:, :, None]


def test_grid_known_vector() -> None:
    batch = np.arange(1, 6, dtype=np.uint8).reshape(5, 1, 1, 1)
    np.testing.assert_array_equal(image.make_grid(batch), GRID_OF_FIVE)
    np.testing.assert_array_equal(expected_grid(batch), GRID_OF_FIVE)  # the oracle other tests use


@pytest.mark.parametrize("n", [1, *GRID_ROWS_COLS])
def test_grid_geometry_and_cell_placement(n: int) -> None:
    h, w = 3, 4
    batch = np.repeat(np.arange(1, n + 1, dtype=np.uint8), h * w).reshape(n, h, w, 1)
    grid = image.make_grid(batch)
    if n == 1:
        assert grid.shape == (h, w, 1)  # torchvision/mxboard: a single image is not padded
        return
    nrows, ncols = GRID_ROWS_COLS[n]
    assert grid.shape == (nrows * (h + 2) + 2, ncols * (w + 2) + 2, 1)
    for k in range(n):
        r, q = divmod(k, ncols)
        top, left = 2 + r * (h + 2), 2 + q * (w + 2)
        assert (grid[top : top + h, left : left + w] == k + 1).all()
    # everything else (padding, empty trailing cells) is 0, and each cell is counted once
    assert np.count_nonzero(grid) == n * h * w


def test_grid_of_16_rgb_64px() -> None:
    batch = RNG.integers(0, 256, (16, 3, 64, 64), dtype=np.uint8)
    (enc,) = image.encode(desc(Kind.IMAGE, {"dataformats": "NCHW"}), batch)
    assert (enc.value.image.height, enc.value.image.width) == (4 * 66 + 2, 4 * 66 + 2)
    np.testing.assert_array_equal(decode_png(enc.value)[1], expected_grid(batch.transpose(0, 2, 3, 1)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_to_uint8_rounds_half_levels(dtype: Any) -> None:
    # k/255 hits level k; just under/over a half level rounds to the nearer one
    # (mxboard's astype(uint8) would truncate 254.9 to 254).
    x = np.array([0.0, 1.0, 0.5, 127.4 / 255, 127.6 / 255, 254.9 / 255, 1 / 255, -0.0], dtype=np.float64)
    got = image.to_uint8(x.astype(dtype))
    assert got.dtype == np.uint8
    assert got.tolist() == [0, 255, 128, 127, 128, 255, 1, 0]


def test_default_dataformats_follow_rank() -> None:
    ref = RNG.integers(0, 256, (2, 5, 6, 3), dtype=np.uint8)
    (enc,) = image.encode(desc(Kind.IMAGE, None), in_format(ref, "NCHW"))
    np.testing.assert_array_equal(decode_png(enc.value)[1], expected_grid(ref))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bad", [1.001, -0.01, math.nan, math.inf, -math.inf, 2.0])
def test_image_float_out_of_range_is_refused(dtype: Any, bad: float) -> None:
    x = np.full((3, 4, 4), 0.5, dtype=dtype)
    x[1, 2, 3] = bad
    with pytest.raises(ValueError, match="NaN" if math.isnan(bad) else r"outside \[0, 1\]"):
        image.encode(desc(Kind.IMAGE, {"dataformats": "CHW"}), x)


def test_image_just_past_one_is_refused_in_every_float_dtype() -> None:
    for dtype in FLOATS:
        x = np.full((2, 2), 1.0, dtype=dtype)
        x[0, 0] = np.nextafter(dtype(1.0), dtype(2.0))
        with pytest.raises(ValueError):
            image.to_uint8(x)
        x[0, 0] = np.nextafter(dtype(0.0), dtype(-1.0))  # the smallest negative subnormal
        with pytest.raises(ValueError):
            image.to_uint8(x)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint16, np.uint32, np.bool_])
def test_image_other_dtypes_are_refused(dtype: Any) -> None:
    with pytest.raises(ValueError, match="float in"):
        image.encode(desc(Kind.IMAGE, {"dataformats": "HW"}), np.zeros((4, 4), dtype=dtype))


def test_image_shape_problems_are_value_errors() -> None:
    with pytest.raises(ValueError, match="rank"):
        image.to_hwc_uint8(np.zeros((2, 4, 4), np.uint8), "NCHW")
    with pytest.raises(ValueError, match="channels"):
        image.to_hwc_uint8(np.zeros((2, 4, 4), np.uint8), "CHW")
    with pytest.raises(ValueError, match="dataformats"):
        image.to_hwc_uint8(np.zeros((4, 4), np.uint8), "WH")
    with pytest.raises(ValueError, match="empty"):
        image.to_hwc_uint8(np.zeros((0, 3, 4, 4), np.float32), "NCHW")
    with pytest.raises(ValueError, match="empty"):
        image.to_hwc_uint8(np.zeros((3, 0, 4), np.uint8), "CHW")


def test_image_value_through_tensorboard_migration() -> None:
    from tensorboard import data_compat
    from tensorboard.compat.proto import summary_pb2 as tb_summary_pb2
    from tensorboard.plugins.image import metadata as tb_image_metadata
    from tensorboard.util import tensor_util

    ref = RNG.integers(0, 256, (4, 7, 5, 3), dtype=np.uint8)
    (enc,) = image.encode(desc(Kind.IMAGE, {"dataformats": "NHWC"}, tag="imgs/grid"), ref)
    theirs = tb_summary_pb2.Summary.Value()
    theirs.ParseFromString(enc.value.SerializeToString())

    migrated = data_compat.migrate_value(theirs)

    assert migrated.tag == "imgs/grid"
    assert migrated.metadata.plugin_data.plugin_name == tb_image_metadata.PLUGIN_NAME == image.PLUGIN_NAME
    content = tb_image_metadata.parse_plugin_metadata(migrated.metadata.plugin_data.content)
    assert content.version == image.PROTO_VERSION and content.converted_to_tensor
    blobs = tensor_util.make_ndarray(migrated.tensor).tolist()
    h, w = 2 * 9 + 2, 2 * 7 + 2
    assert blobs[:2] == [str(w).encode(), str(h).encode()]
    assert blobs[2] == enc.value.image.encoded_image_string
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(blobs[2]))), expected_grid(ref))


def test_image_summary_metadata() -> None:
    md = image.create_summary_metadata()
    assert md.plugin_data.plugin_name == "images"
    assert md.data_class == summary_pb2.DATA_CLASS_BLOB_SEQUENCE
    assert plugin_image_pb2.ImagePluginData.FromString(md.plugin_data.content).version == 0


# --------------------------------------------------------------------------- audio


def read_wav(blob: bytes) -> tuple[int, int, np.ndarray]:
    with wave.open(io.BytesIO(blob), "rb") as w:
        assert w.getsampwidth() == 2 and w.getcomptype() == "NONE"
        frames = w.readframes(w.getnframes())
        samples = np.frombuffer(frames, dtype="<i2").reshape(-1, w.getnchannels())
        return w.getframerate(), w.getnchannels(), samples


@pytest.mark.parametrize("channels", [None, 1, 2])
@pytest.mark.parametrize("dtype", [np.int16, *FLOATS])
def test_audio_sample_exact(dtype: Any, channels: int | None) -> None:
    shape = (1000,) if channels is None else (1000, channels)
    k = RNG.integers(-32767, 32768, shape).astype(np.int16)
    k.flat[:3] = [-32767, 0, 32767]  # full scale both ways, and silence
    if dtype == np.int16:
        data, want = k, k
    elif dtype == np.float16:
        # float16 cannot hold k/32767 exactly; the expectation is rint of what it holds
        data = (k / 32767).astype(np.float16)
        want = np.rint(data.astype(np.float64) * 32767).astype(np.int16)
    else:
        data, want = (k / 32767).astype(dtype), k
    if dtype == np.int16:
        data = data.copy()
        data.flat[3] = -32768  # int16 passes untouched, its own minimum included
        want = data

    (enc,) = audio.encode(desc(Kind.AUDIO, {"sample_rate": 22050}, tag="snd"), data)

    assert enc.metadata is audio.METADATA
    au = enc.value.audio
    nch = 1 if channels is None else channels
    assert (au.sample_rate, au.num_channels, au.length_frames, au.content_type) == (22050.0, nch, 1000, "audio/wav")
    rate, got_ch, samples = read_wav(au.encoded_audio_string)
    assert (rate, got_ch) == (22050, nch)
    np.testing.assert_array_equal(samples, want.reshape(1000, nch))


def test_audio_stereo_is_interleaved_frame_by_frame() -> None:
    left = np.arange(0, 10, dtype=np.int16)
    right = -left - 100
    blob = audio.wav_bytes(np.stack([left, right], axis=1), 8000)
    with wave.open(io.BytesIO(blob)) as w:
        raw = np.frombuffer(w.readframes(10), "<i2")
    assert raw[:4].tolist() == [0, -100, 1, -101]


def test_audio_non_contiguous_input() -> None:
    # a channels-first array transposed by the caller arrives as a strided view
    k = RNG.integers(-1000, 1000, (2, 64)).astype(np.int16)
    blob = audio.wav_bytes(audio.to_int16_frames(k.T), 16000)
    np.testing.assert_array_equal(read_wav(blob)[2], k.T)


def test_audio_float_rounds() -> None:
    x = np.array([0.5, -0.5, 1.0, -1.0, 0.49999 / 32767, 0.50001 / 32767], np.float64)
    assert audio.to_int16_frames(x)[:, 0].tolist() == [16384, -16384, 32767, -32767, 0, 1]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bad", [1.01, -1.01, math.nan, math.inf])
def test_audio_float_out_of_range_is_refused(dtype: Any, bad: float) -> None:
    x = np.zeros((50, 2), dtype=dtype)
    x[10, 1] = bad
    with pytest.raises(ValueError, match="NaN" if math.isnan(bad) else r"outside \[-1, 1\]"):
        audio.encode(desc(Kind.AUDIO, {"sample_rate": 8000}), x)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.uint16, np.bool_])
def test_audio_other_dtypes_are_refused(dtype: Any) -> None:
    with pytest.raises(ValueError, match="int16"):
        audio.encode(desc(Kind.AUDIO, {"sample_rate": 8000}), np.zeros(10, dtype=dtype))


@pytest.mark.parametrize(
    ("shape", "layout", "want"),
    [
        ((1, 50), "frames", (50, 1)),  # size-1 dims dropped, as the writer's check drops them
        ((50, 1), "frames", (50, 1)),
        ((1, 50, 1, 2), "frames", (50, 2)),
        ((2, 50), "channels_first", (50, 2)),
        ((1, 2, 1, 50), "channels_first", (50, 2)),
        ((1, 50), "channels_first", (50, 1)),  # mono has no channel axis to move
        ((), "frames", (1, 1)),
    ],
)
def test_audio_layouts(shape: tuple[int, ...], layout: str, want: tuple[int, int]) -> None:
    k = RNG.integers(-32767, 32768, shape).astype(np.int16)
    (enc,) = audio.encode(desc(Kind.AUDIO, {"sample_rate": 8000, "layout": layout}), k)
    samples = read_wav(enc.value.audio.encoded_audio_string)[2]
    assert samples.shape == want == (enc.value.audio.length_frames, enc.value.audio.num_channels)
    squeezed = k.reshape([d for d in k.shape if d != 1] or [1])
    expect = squeezed.T if layout == "channels_first" and squeezed.ndim == 2 else squeezed
    np.testing.assert_array_equal(samples, expect.reshape(want))


def test_audio_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="layout"):
        audio.encode(desc(Kind.AUDIO, {"sample_rate": 8000, "layout": "planar"}), np.zeros(10, np.int16))


@pytest.mark.parametrize("shape", [(10, 3), (3, 10), (2, 3, 4), (0,), (0, 2)])
def test_audio_bad_shapes_are_refused(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        audio.encode(desc(Kind.AUDIO, {"sample_rate": 8000}), np.zeros(shape, np.float32))


@pytest.mark.parametrize("rate", [0, -8000, 44100.5, math.nan, math.inf, "44100", None, True, 2**32])
def test_audio_bad_sample_rates_are_refused(rate: Any) -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        audio.encode(desc(Kind.AUDIO, {"sample_rate": rate}), np.zeros(10, np.float32))


def test_audio_integral_float_and_numpy_rates_pass() -> None:
    for rate in (16000.0, np.int64(16000)):
        (enc,) = audio.encode(desc(Kind.AUDIO, {"sample_rate": rate}), np.zeros(10, np.float32))
        assert read_wav(enc.value.audio.encoded_audio_string)[0] == 16000


def test_audio_value_through_tensorboard_migration() -> None:
    from tensorboard import data_compat
    from tensorboard.compat.proto import summary_pb2 as tb_summary_pb2
    from tensorboard.plugins.audio import metadata as tb_audio_metadata
    from tensorboard.util import tensor_util

    x = np.sin(np.linspace(0, 20, 441, dtype=np.float32))[:, None].repeat(2, axis=1)
    (enc,) = audio.encode(desc(Kind.AUDIO, {"sample_rate": 44100}, tag="snd/sine"), x)
    ours = summary_pb2.Summary.Value()
    ours.CopyFrom(enc.value)
    ours.metadata.CopyFrom(enc.metadata)  # as the sidecar attaches it to a tag's first value
    theirs = tb_summary_pb2.Summary.Value()
    theirs.ParseFromString(ours.SerializeToString())

    migrated = data_compat.migrate_value(theirs)

    assert migrated.tag == "snd/sine"
    assert migrated.metadata.plugin_data.plugin_name == tb_audio_metadata.PLUGIN_NAME == audio.PLUGIN_NAME
    content = tb_audio_metadata.parse_plugin_metadata(migrated.metadata.plugin_data.content)
    assert content.encoding == tb_audio_metadata.Encoding.Value("WAV") and content.converted_to_tensor
    blobs = tensor_util.make_ndarray(migrated.tensor)
    assert blobs.shape == (1, 2) and blobs[0, 1] == b""
    rate, nch, samples = read_wav(blobs[0, 0])
    assert (rate, nch, samples.shape) == (44100, 2, (441, 2))
    np.testing.assert_array_equal(samples, np.rint(x * 32767).astype(np.int16))


def test_audio_summary_metadata() -> None:
    # The Rust data server takes metadata with a data class verbatim, and the Audio tab
    # derives the clip's MIME type from ``encoding``: both must be set (see audio.py).
    md = audio.create_summary_metadata()
    assert md == audio.METADATA
    assert md.plugin_data.plugin_name == "audio"
    assert md.data_class == summary_pb2.DATA_CLASS_BLOB_SEQUENCE
    content = plugin_audio_pb2.AudioPluginData.FromString(md.plugin_data.content)
    assert content.version == 0 and content.encoding == plugin_audio_pb2.AudioPluginData.WAV == 11


# --------------------------------------------------------------------------- video


def few_colour_video(n: int, t: int, c: int) -> np.ndarray:
    """(N, T, C, H, W) uint8 whose every frame differs from the last and uses few colours,
    so the GIF's 256-colour palette represents it exactly."""
    palette = RNG.integers(0, 256, (6, c), dtype=np.uint8)
    idx = RNG.integers(0, len(palette), (n, t, 5, 7))
    idx[:, :, 0, 0] = np.arange(t) % len(palette)  # consecutive frames differ
    return np.ascontiguousarray(palette[idx].transpose(0, 1, 4, 2, 3))


def gif_frames(blob: bytes) -> tuple[Image.Image, list[np.ndarray]]:
    im = Image.open(io.BytesIO(blob))
    assert im.format == "GIF"
    frames = []
    for i in range(im.n_frames):
        im.seek(i)
        frames.append(np.asarray(im.convert("RGB")))
    im.seek(0)
    return im, frames


def test_video_rgb_gif_frames_size_duration_and_first_frame() -> None:
    v = few_colour_video(3, 4, 3)
    (enc,) = video.encode(desc(Kind.VIDEO, {"fps": 6}, tag="vid", run="r"), v)

    assert enc.run == "r" and enc.metadata is None
    img = enc.value.image
    assert img.encoded_image_string[:6] == b"GIF89a"
    im, frames = gif_frames(img.encoded_image_string)
    grids = [expected_grid(v[:, t].transpose(0, 2, 3, 1)) for t in range(4)]
    assert len(frames) == 4 and im.info["loop"] == 0
    assert im.size == (img.width, img.height) == (grids[0].shape[1], grids[0].shape[0])
    assert img.colorspace == 3
    assert gif_durations_ms(img.encoded_image_string) == [170, 160, 170, 170]  # frame ends at 1/6 s steps, in cs
    np.testing.assert_array_equal(frames[0], grids[0])
    np.testing.assert_array_equal(frames[-1], grids[-1])  # delta frames composite back exactly


def test_video_grayscale_float_is_lossless() -> None:
    k = RNG.integers(0, 256, (2, 3, 1, 6, 5), dtype=np.uint8)
    (enc,) = video.encode(desc(Kind.VIDEO, {"fps": 4}), (k / 255).astype(np.float32))
    assert enc.value.image.colorspace == 1
    _, frames = gif_frames(enc.value.image.encoded_image_string)
    assert len(frames) == 3
    for t, frame in enumerate(frames):
        want = expected_grid(k[:, t].transpose(0, 2, 3, 1))[:, :, 0]
        np.testing.assert_array_equal(frame[:, :, 0], want)


def test_video_alpha_is_dropped() -> None:
    rgba = few_colour_video(1, 2, 4)
    (enc,) = video.encode(desc(Kind.VIDEO, {"fps": 4}), rgba)
    assert enc.value.image.colorspace == 3
    _, frames = gif_frames(enc.value.image.encoded_image_string)
    np.testing.assert_array_equal(frames[0], rgba[0, 0, :3].transpose(1, 2, 0))  # N=1: no padding


@pytest.mark.parametrize(
    ("fps", "n", "delays"),
    [
        (4, 3, [25, 25, 25]),
        (10, 2, [10, 10]),
        (30, 6, [3, 4, 3, 3, 4, 3]),  # one rounded delay (3 cs) would play 30 fps at 33.3
        (6, 4, [17, 16, 17, 17]),
        (50, 3, [2, 2, 2]),
        (60, 3, [2, 2, 2]),  # browsers slow delays under 2 cs to 10 cs: above 50 fps, 50
        (1000, 2, [2, 2]),
        (100 / 65535, 2, [65535, 65535]),  # the longest a GIF frame lasts
    ],
)
def test_frame_delays(fps: float, n: int, delays: list[int]) -> None:
    assert video.frame_delays_cs(fps, n) == delays


@pytest.mark.parametrize("fps", [0.5, 4, 7, 24, 29.97, 30, 44.1, 50])
def test_frame_delays_keep_the_rate_asked(fps: float) -> None:
    """Up to 50 fps, frame i ends within half a centisecond of (i + 1) / fps s."""
    delays = video.frame_delays_cs(fps, 500)
    ends = np.cumsum(delays)
    assert min(delays) >= 2
    assert np.abs(ends - np.arange(1, 501) * 100 / fps).max() <= 0.5


def test_frame_delays_agree_with_the_writers_checks() -> None:
    """The writer checks runs of still frames in the caller against the schedule the
    encoder writes: both take it from formats/gif.py, and neither keeps its own."""
    from mxsidecar.formats import gif
    from mxsidecar.training.kinds import video as video_calls

    for fps in (100 / 65535, 0.01, 0.3, 3, 29.97, 30, 50, 60, 1e6):
        assert gif.frame_delays_cs(fps, 64) == video.frame_delays_cs(fps, 64)
    assert gif.MIN_FPS == video.MIN_FPS and gif.MAX_FPS == video.MAX_FPS
    assert not {"frame_delays_cs", "MIN_FPS", "MAX_FPS", "MAX_FRAME_CS"} & set(vars(video_calls))


@pytest.mark.parametrize("fps", [0, -1, math.nan, math.inf, "4", None, True, 1e-4, 5e-324])
def test_video_bad_fps_is_refused(fps: Any) -> None:
    with pytest.raises(ValueError, match="fps"):
        video.encode(desc(Kind.VIDEO, {"fps": fps}), np.zeros((1, 2, 3, 4, 4), np.uint8))


def test_video_slow_clip_keeps_its_delays() -> None:
    """Distinct frames of 500 s each: each keeps 500 s (the delay was once capped at
    655.35 s / T, here 163.8 s, so the clip played 3x too fast, silently)."""
    v = few_colour_video(1, 4, 3)
    (enc,) = video.encode(desc(Kind.VIDEO, {"fps": 0.002}), v)
    assert gif_durations_ms(enc.value.image.encoded_image_string) == [500_000] * 4


def test_video_still_frames_longer_than_a_gif_frame_are_refused() -> None:
    """Identical frames merge into one GIF frame of their summed delay: a run over
    655.35 s is refused whole (the sidecar counts it), never shortened."""
    v = few_colour_video(1, 4, 3)
    v[:, 2] = v[:, 1]  # frames 1 and 2 at 500 s each: 1000 s as one frame
    with pytest.raises(ValueError, match=r"frames 1\.\.2 are identical and would show for 1000 s"):
        video.encode(desc(Kind.VIDEO, {"fps": 0.002}), v)
    v[:, 2, 0, 0, 0] ^= 1  # one pixel apart: no merge, and each frame keeps its 500 s
    (enc,) = video.encode(desc(Kind.VIDEO, {"fps": 0.002}), v)
    assert gif_durations_ms(enc.value.image.encoded_image_string) == [500_000] * 4


def test_video_bad_data_is_refused() -> None:
    opts = {"fps": 4}
    with pytest.raises(ValueError, match=r"\(N, T, C, H, W\)"):
        video.encode(desc(Kind.VIDEO, opts), np.zeros((2, 3, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="channels"):
        video.encode(desc(Kind.VIDEO, opts), np.zeros((1, 2, 2, 4, 4), np.uint8))
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        video.encode(desc(Kind.VIDEO, opts), np.full((1, 2, 3, 4, 4), 1.5, np.float32))
    with pytest.raises(ValueError, match="float in"):
        video.encode(desc(Kind.VIDEO, opts), np.zeros((1, 2, 3, 4, 4), np.int32))
    with pytest.raises(ValueError, match="empty"):
        video.encode(desc(Kind.VIDEO, opts), np.zeros((1, 0, 3, 4, 4), np.uint8))


def test_video_identical_frames_merge_but_keep_the_playing_time() -> None:
    v = np.zeros((1, 3, 1, 4, 4), np.uint8)
    v[0, 2] = 200  # frames 0 and 1 are identical
    _, frames = gif_frames(video.encode(desc(Kind.VIDEO, {"fps": 10}), v)[0].value.image.encoded_image_string)
    durations = gif_durations_ms(video.gif_bytes(video.video_frames(v), [10, 10, 10]))
    assert len(frames) == 2 and durations == [200, 100]


def test_video_metadata_is_the_images_plugin() -> None:
    assert video.PLUGIN_NAME == image.PLUGIN_NAME == "images"
    assert video.create_summary_metadata() == image.create_summary_metadata()
