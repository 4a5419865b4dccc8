"""Every summary kind, end to end: logged through SidecarWriter, read back through
TensorBoard's own plugin data path (the multiplexer its Python loader uses)."""

from __future__ import annotations

import io
import json
import os
import wave

import numpy as np
import pytest
from conftest import event_files, gif_durations_ms, load_multiplexer, read_events, tensor_values
from PIL import Image

from mxsidecar import SidecarWriter, SummaryWriter

pytestmark = pytest.mark.timeout(120)


def png_pixels(blob: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(blob)))


def image_blobs(mux, run: str, tag: str) -> list[tuple[int, bytes]]:
    """(step, PNG) pairs as TensorBoard's image plugin sees them: [w, h, png...] tensors."""
    from tensorboard.util import tensor_util

    out = []
    for e in mux.Tensors(run, tag):
        t = tensor_util.make_ndarray(e.tensor_proto)
        out.append((e.step, t[2]))
    return out


def test_images_every_layout_pixel_exact(tmp_path) -> None:
    logdir = str(tmp_path)
    rng = np.random.default_rng(0)
    chw = rng.integers(0, 256, (3, 5, 7)).astype(np.uint8)
    floats = rng.random((4, 6)).astype(np.float32)
    with SidecarWriter(logdir) as sw:
        sw.add_image("chw", chw, 0)  # mxboard: rank 3 means CHW
        sw.add_image("hwc", chw.transpose(1, 2, 0), 0, dataformats="HWC")
        sw.add_image("hw_float", floats, 0)
        sw.add_image("rgba", rng.integers(0, 256, (5, 5, 4)).astype(np.uint8), 0, dataformats="HWC")
    mux = load_multiplexer(logdir)
    assert {"chw", "hwc", "hw_float", "rgba"} <= set(mux.PluginRunToTagToContent("images")["."])
    ((_, png),) = image_blobs(mux, ".", "chw")
    np.testing.assert_array_equal(png_pixels(png), chw.transpose(1, 2, 0))
    ((_, png),) = image_blobs(mux, ".", "hwc")
    np.testing.assert_array_equal(png_pixels(png), chw.transpose(1, 2, 0))
    ((_, png),) = image_blobs(mux, ".", "hw_float")
    np.testing.assert_array_equal(png_pixels(png), np.rint(floats * 255).astype(np.uint8))
    ((_, png),) = image_blobs(mux, ".", "rgba")
    assert png_pixels(png).shape == (5, 5, 4)


def test_image_batch_becomes_a_grid(tmp_path) -> None:
    logdir = str(tmp_path)
    batch = np.zeros((5, 3, 4, 4), dtype=np.uint8)
    for i in range(5):
        batch[i] = 10 * (i + 1)
    with SidecarWriter(logdir) as sw:
        sw.add_images("grid", batch, 2)
    ((step, png),) = image_blobs(load_multiplexer(logdir), ".", "grid")
    px = png_pixels(png)
    # 5 images: 3 per row, 2 rows, 2 px gaps around and between
    assert step == 2 and px.shape == (2 * 6 + 2, 3 * 6 + 2, 3)
    for i in range(5):
        r, c = divmod(i, 3)
        cell = px[2 + r * 6 : 2 + r * 6 + 4, 2 + c * 6 : 2 + c * 6 + 4]
        assert (cell == 10 * (i + 1)).all()
    assert (px[0:2] == 0).all()


def test_audio_sample_exact(tmp_path) -> None:
    logdir = str(tmp_path)
    t = np.linspace(0, 1, 8000, endpoint=False)
    mono = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    stereo = np.stack([mono, -mono], axis=1)
    pcm = (np.arange(-500, 500, dtype=np.int16) * 60).astype(np.int16)
    with SidecarWriter(logdir) as sw:
        sw.add_audio("mono", mono, sample_rate=8000, global_step=1)
        sw.add_audio("stereo", stereo, 8000, 1)
        sw.add_audio("int16", pcm, 16000, 1)
    from tensorboard.util import tensor_util

    mux = load_multiplexer(logdir)
    assert {"mono", "stereo", "int16"} <= set(mux.PluginRunToTagToContent("audio")["."])

    def frames(tag):
        (e,) = mux.Tensors(".", tag)
        t = tensor_util.make_ndarray(e.tensor_proto)  # [k] or [k, 2] (clip, label)
        wav = t.reshape(t.shape[0], -1)[0][0]
        with wave.open(io.BytesIO(wav)) as w:
            return w.getframerate(), w.getnchannels(), np.frombuffer(w.readframes(w.getnframes()), "<i2")

    rate, ch, data = frames("mono")
    assert (rate, ch) == (8000, 1)
    np.testing.assert_array_equal(data, np.rint(mono * 32767).astype(np.int16))
    rate, ch, data = frames("stereo")
    assert ch == 2
    np.testing.assert_array_equal(data.reshape(-1, 2), np.rint(stereo * 32767).astype(np.int16))
    rate, ch, data = frames("int16")
    assert rate == 16000
    np.testing.assert_array_equal(data, pcm)


def test_video_is_an_animated_gif(tmp_path) -> None:
    logdir = str(tmp_path)
    vid = np.zeros((2, 3, 3, 8, 8), dtype=np.uint8)
    for t in range(3):
        vid[:, t] = 80 * t
    with SidecarWriter(logdir) as sw:
        sw.add_video("clip", vid, 0, fps=5)
    ((_, blob),) = image_blobs(load_multiplexer(logdir), ".", "clip")
    gif = Image.open(io.BytesIO(blob))
    assert gif.format == "GIF" and gif.n_frames == 3


def test_video_adjustments_are_warned_in_the_callers_thread(tmp_path) -> None:
    """What a GIF cannot do is said at the call, before the item is queued (issue 15,
    defect 6): above 50 fps it plays at 50, and alpha is dropped.  The warnings point
    at this file: the caller's frame, not the receiver thread's (which says what only
    the sidecar could see)."""
    import warnings

    logdir = str(tmp_path)
    vid = np.zeros((1, 3, 4, 8, 8), dtype=np.uint8)
    for t in range(3):
        vid[:, t] = 80 * t
    with SidecarWriter(logdir) as sw:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sw.add_video("fast", vid[:, :, :3], 0, fps=120)
            sw.add_video("alpha", vid, 0, fps=25)
            sw.add_video("plain", vid[:, :, :3], 0, fps=30)
            said = [(str(w.message), w.filename) for w in caught]
        assert [f for _, f in said] == [__file__, __file__]
        assert "fps=120 is above 50" in said[0][0] and said[0][0].endswith("it will play at 50 fps")
        assert "alpha channel of vid_tensor is dropped" in said[1][0]
    mux = load_multiplexer(logdir)
    blobs = {tag: image_blobs(mux, ".", tag)[0][1] for tag in ("fast", "alpha", "plain")}
    assert gif_durations_ms(blobs["fast"]) == [20, 20, 20]  # 50 fps, as warned
    assert gif_durations_ms(blobs["alpha"]) == [40, 40, 40]
    assert gif_durations_ms(blobs["plain"]) == [30, 40, 30]  # 30 fps on average, not 33.3


def test_video_frame_delays_a_gif_cannot_hold_are_refused_in_the_caller(tmp_path) -> None:
    """A GIF frame lasts at most 655.35 s: a slower fps, or numpy frames that stay
    identical longer, raise here; distinct slow frames keep their time (they were
    once cut to 655.35 s / T each, silently)."""
    vid = np.zeros((1, 3, 1, 4, 4), dtype=np.uint8)
    with SidecarWriter(str(tmp_path)) as sw:
        with pytest.raises(ValueError, match=r"fps must be at least 0.0015259 "):
            sw.add_video("v", vid, 0, fps=0.001)
        with pytest.raises(ValueError, match=r"vid_tensor frames 0\.\.2 are identical .* 1500 s"):
            sw.add_video("v", vid, 0, fps=0.002)
        assert sw._pipe._seq == 0
        vid[0, 1] = 1
        vid[0, 2] = 2
        sw.add_video("v", vid, 0, fps=0.002)
    ((_, blob),) = image_blobs(load_multiplexer(str(tmp_path)), ".", "v")
    assert gif_durations_ms(blob) == [500_000] * 3


def test_pr_curve_matches_tensorboard(tmp_path) -> None:
    logdir = str(tmp_path)
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 2, 500).astype(bool)
    preds = np.clip(labels * 0.6 + rng.random(500) * 0.4, 0, 1).astype(np.float32)
    with SidecarWriter(logdir) as sw:
        sw.add_pr_curve("pr", labels, preds, num_thresholds=201, global_step=3)
    from tensorboard.plugins.pr_curve import metadata as prmeta
    from tensorboard.util import tensor_util

    mux = load_multiplexer(logdir)
    content = mux.PluginRunToTagToContent(prmeta.PLUGIN_NAME)["."]["pr"]
    assert prmeta.parse_plugin_metadata(content).num_thresholds == 201
    (e,) = mux.Tensors(".", "pr")
    data = tensor_util.make_ndarray(e.tensor_proto)
    assert data.shape == (6, 201) and e.step == 3
    tp, fp = data[0], data[1]
    assert tp[0] == labels.sum() and fp[0] == (~labels).sum()  # threshold 0: everything positive


def test_embedding_projector_files_and_config(tmp_path) -> None:
    from google.protobuf import text_format
    from tensorboard.plugins.projector import projector_config_pb2

    logdir = str(tmp_path)
    mat = np.random.default_rng(1).random((20, 4)).astype(np.float32)
    imgs = np.random.default_rng(2).random((20, 1, 6, 6)).astype(np.float32)
    with SidecarWriter(logdir) as sw:
        sw.add_embedding("feat", mat, labels=[f"p{i}" for i in range(20)], images=imgs, global_step=7)
    with open(os.path.join(logdir, "projector_config.pbtxt")) as f:
        cfg = text_format.Parse(f.read(), projector_config_pb2.ProjectorConfig())
    (emb,) = cfg.embeddings
    assert emb.tensor_name == "feat:00007"
    base = logdir
    for rel in (emb.tensor_path, emb.metadata_path, emb.sprite.image_path):
        path = os.path.normpath(os.path.join(base, rel))
        assert os.path.commonpath([path, base]) == base and os.path.exists(path)
    with open(os.path.join(base, emb.metadata_path)) as f:
        assert f.read().split("\n")[:2] == ["p0", "p1"]  # one column: no header row
    got = np.loadtxt(os.path.join(base, emb.tensor_path), delimiter="\t", dtype=np.float32)
    np.testing.assert_array_equal(got, mat)


def test_graph_of_a_hybridized_block(tmp_path) -> None:
    mx = pytest.importorskip("mxnet")
    from tensorboard.compat.proto import graph_pb2

    logdir = str(tmp_path)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(4, 3), mx.gluon.nn.Activation("relu"), mx.gluon.nn.Dense(2))
    net.initialize()
    with SidecarWriter(logdir) as sw, pytest.raises(ValueError, match="hybridize"):
        sw.add_graph(net)
    net.hybridize()
    net(mx.nd.ones((1, 1, 8, 8)))
    with SidecarWriter(logdir) as sw:
        sw.add_graph(net, input_shapes={"data": (1, 1, 8, 8)})
    graphs = [e.graph_def for p in event_files(logdir) for e in read_events(p) if e.graph_def]
    (blob,) = graphs
    g = graph_pb2.GraphDef.FromString(blob)
    ops = {n.op for n in g.node}
    assert {"Convolution", "Activation", "FullyConnected"} <= ops
    assert load_multiplexer(logdir).Graph(".") is not None


def test_hparams_in_the_writers_own_run(tmp_path) -> None:
    from tensorboard.plugins.hparams import metadata as hmeta

    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        sw.add_scalar("loss", 0.5, 10)
        sw.add_hparams({"lr": 0.01, "opt": "adam", "bn": True}, {"accuracy": 0.9}, {"opt": ["adam", "sgd"]}, 10)
    mux = load_multiplexer(logdir)
    assert list(mux.Runs()) == ["."]  # no extra sub-run per call
    content = mux.PluginRunToTagToContent(hmeta.PLUGIN_NAME)["."]
    start = hmeta.parse_session_start_info_plugin_data(content[hmeta.SESSION_START_INFO_TAG])
    assert start.hparams["lr"].number_value == 0.01 and start.hparams["opt"].string_value == "adam"
    exp = hmeta.parse_experiment_plugin_data(content[hmeta.EXPERIMENT_TAG])
    assert [m.name.tag for m in exp.metric_infos] == ["accuracy"]
    assert tensor_values(mux, ".", "accuracy") == [(10, pytest.approx(0.9))]


def test_custom_scalars_layout(tmp_path) -> None:
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.custom_scalar import metadata as csmeta
    from tensorboard.util import tensor_util

    logdir = str(tmp_path)
    layout = {"Training": {"loss": ["Multiline", ["loss/.*"]], "acc": ["Margin", ["acc", "acc_lo", "acc_hi"]]}}
    with SidecarWriter(logdir) as sw:
        sw.add_custom_scalars(layout)
    mux = load_multiplexer(logdir)
    assert csmeta.CONFIG_SUMMARY_TAG in mux.PluginRunToTagToContent(csmeta.PLUGIN_NAME)["."]
    (e,) = mux.Tensors(".", csmeta.CONFIG_SUMMARY_TAG)
    parsed = layout_pb2.Layout.FromString(tensor_util.make_ndarray(e.tensor_proto).item())
    assert [c.title for c in parsed.category[0].chart] == ["loss", "acc"]
    assert list(parsed.category[0].chart[0].multiline.tag) == ["loss/.*"]


def test_mxboard_script_runs_unchanged(tmp_path) -> None:
    """mxboard's own README usage, with only the import changed."""
    logdir = str(tmp_path)
    xs = np.arange(0, 2 * np.pi, 0.5)
    sw = SummaryWriter(logdir=logdir, max_queue=10, flush_secs=120, filename_suffix=None, verbose=False)
    for i, x in enumerate(xs):
        sw.add_scalar("curves", {"sin": np.sin(x), "cos": np.cos(x)}, i)
        sw.add_scalar("curves", ("exp(sin)", np.exp(np.sin(x))), i)
        sw.add_scalar("curves", ["exp(cos)", np.exp(np.cos(x))], i)
        sw.add_scalar("curves", np.sin(x) ** 2, i)
    sw.add_histogram("h", np.random.normal(size=100), 0, bins="default")
    sw.add_text("t", "hello", 0)
    sw.add_image("img", np.random.random((3, 8, 8)), 0)
    sw.export_scalars(os.path.join(logdir, "scalars.json"))
    sw.close()
    sw.reopen()
    sw.add_scalar("after", 1.0, 0)
    sw.close()
    runs = set(load_multiplexer(logdir).PluginRunToTagToContent("scalars"))
    assert {".", "curves/sin", "curves/cos", "curves/exp(sin)", "curves/exp(cos)"} <= runs
    with open(os.path.join(logdir, "scalars.json")) as f:
        exported = json.load(f)
    assert len(exported[os.path.join(logdir, "curves/sin")]) == len(xs)
    assert len(exported[os.path.join(logdir, "curves")]) == len(xs)


def test_summary_writer_is_the_same_class() -> None:
    """The README's promise to mxboard users: ``SummaryWriter`` is no subclass or
    wrapper with its own behaviour, it is ``SidecarWriter``."""
    assert SummaryWriter is SidecarWriter


def test_figure_is_rasterised_to_an_image(tmp_path) -> None:
    """A matplotlib figure reaches the Images tab at its pixel size; a list of figures
    becomes one grid; the figures are closed afterwards, as tensorboardX does."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logdir = str(tmp_path)

    def red_figure():
        fig = plt.figure(figsize=(2, 1), dpi=50)  # 100 x 50 px
        fig.patch.set_facecolor((1.0, 0.0, 0.0))
        return fig

    one, pair = red_figure(), [red_figure(), red_figure()]
    with SidecarWriter(logdir) as sw:
        sw.add_figure("fig", one, 4)
        sw.add_figure("figs", pair, 5)
    assert not plt.get_fignums()  # close=True by default
    mux = load_multiplexer(logdir)
    ((step, png),) = image_blobs(mux, ".", "fig")
    px = png_pixels(png)
    assert step == 4 and px.shape == (50, 100, 4)
    assert (px[..., :3] == (255, 0, 0)).all()
    ((_, grid),) = image_blobs(mux, ".", "figs")
    assert png_pixels(grid).shape == (2 + 50 + 2, 2 + 2 * (100 + 2), 4)  # two cells in a row, 2 px gaps


def test_clear_scalar_dict_forgets_what_export_scalars_returns(tmp_path) -> None:
    """mxboard's pair: export_scalars writes the scalars logged since the last
    clear_scalar_dict (read back from the event files, which keep everything)."""
    logdir = str(tmp_path)
    sw = SummaryWriter(logdir)
    for i in range(3):
        sw.add_scalar("loss", float(i), i)
    sw.clear_scalar_dict()
    for i in range(3, 5):
        sw.add_scalar("loss", float(i), i)
    out = os.path.join(logdir, "scalars.json")
    sw.export_scalars(out)
    sw.close()
    with open(out) as f:
        exported = json.load(f)
    assert [(step, value) for _wall, step, value in exported[os.path.join(logdir, "loss")]] == [(3, 3.0), (4, 4.0)]
    assert [s for s, _ in tensor_values(load_multiplexer(logdir), ".", "loss")] == [0, 1, 2, 3, 4]


def test_embedding_with_labels_only_and_tsv_or_bytes(tmp_path) -> None:
    """One part (no images): the sidecar still gets the matrix by name."""
    logdir = str(tmp_path)
    mat = np.arange(15, dtype=np.float32).reshape(5, 3)
    with SidecarWriter(logdir) as sw:
        sw.add_embedding("a", mat, labels=list("abcde"))
        sw.add_embedding("b", mat, global_step=1, tensor_format="bytes")
        sw.flush()
        assert sw.stats()["rejected"] == 0
    assert os.path.exists(os.path.join(logdir, "00000", "a", "metadata.tsv"))


def test_embedding_bytes_format_is_kept_or_refused_never_tsv(tmp_path) -> None:
    """tensor_format='bytes' once fell back to TSV, silently, when the matrix's bytes
    decode as UTF-8 (issue 15, defect 6).  Now: tensors.bytes that TensorBoard's
    projector reads as binary (one +0.0 spelled -0.0), or a refusal: in the caller for
    numpy, in the sidecar (counted, warned) for an NDArray."""
    mx = pytest.importorskip("mxnet")
    from tensorboard.plugins.projector import projector_plugin

    logdir = str(tmp_path)
    zeros = np.zeros((4, 3), np.float32)
    twos = np.full((4, 3), 2.0, np.float32)  # 00 00 00 40: valid UTF-8, and no zero to flip
    with SidecarWriter(logdir) as sw:
        with pytest.raises(ValueError, match=r"tensor_format='bytes': the float32 bytes of embedding are valid UTF-8"):
            sw.add_embedding("twos", twos, tensor_format="bytes")
        assert sw._pipe._seq == 0
        sw.add_embedding("zeros", zeros, tensor_format="bytes")
        sw.add_embedding("zeros_nd", mx.nd.array(zeros), tensor_format="bytes")
        with pytest.warns(RuntimeWarning, match="'twos_nd' was not written: tensor_format='bytes'"):
            sw.add_embedding("twos_nd", mx.nd.array(twos), tensor_format="bytes")
            sw.flush()
            assert sw.stats()["rejected"] == 1
    for tag in ("zeros", "zeros_nd"):
        path = os.path.join(logdir, "00000", tag, "tensors.bytes")
        assert sorted(os.listdir(os.path.dirname(path))) == ["tensors.bytes"]
        with pytest.raises(UnicodeDecodeError):  # TensorBoard's first try, which must fail
            projector_plugin._read_tensor_tsv_file(path)
        back = projector_plugin._read_tensor_binary_file(path, [4, 3])
        np.testing.assert_array_equal(back, zeros)
        assert np.count_nonzero(np.signbit(back)) == 1  # the one -0.0
    assert not os.path.exists(os.path.join(logdir, "00000", "twos_nd"))
