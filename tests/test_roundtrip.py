"""What we write, read back by TensorBoard's own loaders."""

from __future__ import annotations

import os
import re
import socket

import numpy as np
import pytest
from conftest import event_files, load_multiplexer, read_events, tensor_values
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mxsidecar import SidecarWriter, SummaryWriter

pytestmark = pytest.mark.timeout(60)


def test_scalars_round_trip(tmp_path) -> None:
    logdir = str(tmp_path)
    values = [1.0 / (i + 1) for i in range(300)]
    with SidecarWriter(logdir) as sw:
        for i, x in enumerate(values):
            sw.add_scalar("train/loss", x, global_step=i)
        sw.add_scalar("acc", np.float32(0.25), 5)
        sw.add_scalar("n", 7)
        sw.add_scalar("nan", float("nan"), 1)
    mux = load_multiplexer(logdir)
    assert mux.PluginRunToTagToContent("scalars") == {".": {"train/loss": b"", "acc": b"", "n": b"", "nan": b""}}
    got = tensor_values(mux, ".", "train/loss")
    assert [s for s, _ in got] == list(range(300))
    np.testing.assert_allclose([float(x) for _, x in got], values, rtol=1e-7)  # float32
    assert tensor_values(mux, ".", "acc") == [(5, pytest.approx(0.25))]
    assert tensor_values(mux, ".", "n")[0][0] == 0  # global_step None -> 0
    assert np.isnan(tensor_values(mux, ".", "nan")[0][1])


def test_scalar_groups_become_runs(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        for step in range(5):
            sw.add_scalars("lr", {"encoder": 0.1 * step, "decoder": 0.2 * step}, step)
    mux = load_multiplexer(logdir)
    tags = mux.PluginRunToTagToContent("scalars")
    assert tags == {"lr/encoder": {"lr": b""}, "lr/decoder": {"lr": b""}}
    assert [float(x) for _, x in tensor_values(mux, "lr/decoder", "lr")] == pytest.approx([0.2 * s for s in range(5)])
    # One writer, one sidecar: the main run exists too, and no thread per tag here.
    assert os.path.isdir(os.path.join(logdir, "lr", "encoder"))


def test_scalar_groups_share_the_writers_one_sidecar(tmp_path) -> None:
    """add_scalars makes a run per name (tensorboardX's layout) without a writer, a
    thread or a process per run: the one sidecar writes every run's file."""
    from conftest import sidecar_children

    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        sw.add_scalars("loss", {"train": 1.0, "val": 2.0, "test": 3.0}, 0)
        stats = sw.stats()
        assert [p.pid for p in sidecar_children()] == [stats["sidecar_pid"]]
        assert len(stats["sidecar"]["files"]) == 4  # the writer's own run and one per name
    assert len(event_files(logdir)) == 4


def test_text_round_trip(tmp_path) -> None:
    logdir = str(tmp_path)
    doc = "# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nünïcode ✓"
    with SummaryWriter(logdir) as sw:
        sw.add_text("notes", doc, 3)
        sw.add_text("notes", "second", 4)
    mux = load_multiplexer(logdir)
    assert "notes" in mux.PluginRunToTagToContent("text")["."]
    got = tensor_values(mux, ".", "notes")
    assert [(s, x.item().decode()) for s, x in got] == [(3, doc), (4, "second")]


def test_text_plugin_renders_markdown(tmp_path) -> None:
    """TensorBoard's text plugin itself turns our value into HTML (mxboard#24 never did)."""
    from tensorboard.plugins.text import text_plugin

    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        sw.add_text("md", "**bold**", 1)
    mux = load_multiplexer(logdir)
    (event,) = mux.Tensors(".", "md")
    from tensorboard.util import tensor_util

    html = text_plugin.text_array_to_html(tensor_util.make_ndarray(event.tensor_proto), enable_markdown=True)
    assert "<strong>bold</strong>" in html


def test_file_name_first_event_and_metadata_once(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir, filename_suffix=".mx") as sw:
        for i in range(3):
            sw.add_scalar("a", i, i)
            sw.add_text("t", "x", i)
    (path,) = event_files(logdir)
    name = os.path.basename(path)
    assert re.fullmatch(
        rf"events\.out\.tfevents\.\d{{10}}\.{re.escape(socket.gethostname())}\.{os.getpid()}\.\d+\.mx", name
    )
    events = read_events(path)
    assert events[0].file_version == "brain.Event:2"
    assert events[0].source_metadata.writer == "mxsidecar"
    with_md = [(v.tag, e.step) for e in events[1:] for v in e.summary.value if v.HasField("metadata")]
    assert with_md == [("a", 0), ("t", 0)]
    assert len(events) == 1 + 6


def test_walltime_and_steps_as_given(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        sw.add_scalar("x", 1.0, global_step=np.int64(12), walltime=1234.5)
    (path,) = event_files(logdir)
    (ev,) = [e for e in read_events(path) if e.HasField("summary")]
    assert (ev.step, ev.wall_time) == (12, 1234.5)


def test_order_is_order_logged(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        for i in range(2000):
            if i % 3:
                sw.add_scalar("s", i, i)
            else:
                sw.add_text("t", str(i), i)
    steps = [e.step for e in read_events(event_files(logdir)[0]) if e.HasField("summary")]
    assert steps == list(range(2000))


def test_purge_step_hides_the_crashed_tail(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        for i in range(10):
            sw.add_scalar("loss", i, i)
    with SidecarWriter(logdir, purge_step=5) as sw:  # resumed from a checkpoint at step 5
        for i in range(5, 8):
            sw.add_scalar("loss", 100 + i, i)
    mux = load_multiplexer(logdir)
    got = [(s, float(x)) for s, x in tensor_values(mux, ".", "loss")]
    assert got == [(i, float(i)) for i in range(5)] + [(i, 100.0 + i) for i in range(5, 8)]


def test_two_writers_one_logdir_share_a_file_unless_told_not_to(tmp_path) -> None:
    """TensorBoard's Python loader follows only the newest file of a run: two writers of
    one run share the node's sidecar and its one file; share_sidecar=False gives each
    its own file, with distinct names."""
    shared, private = str(tmp_path / "shared"), str(tmp_path / "private")
    with SidecarWriter(shared) as a, SidecarWriter(shared) as b:
        a.add_scalar("a", 1, 0)
        b.add_scalar("b", 2, 0)
    (path,) = event_files(shared)
    assert sorted(v.tag for e in read_events(path) for v in e.summary.value) == ["a", "b"]
    with SidecarWriter(private, share_sidecar=False) as a, SidecarWriter(private, share_sidecar=False) as b:
        a.add_scalar("a", 1, 0)
        b.add_scalar("b", 2, 0)
    assert len(event_files(private)) == 2


# Values the sidecar's argparse would take for options of their own if they travelled as a
# separate word ('--suffix', '-v2': "expected one argument", exit 2; '--help': exit 0).
OPTION_LIKE_SUFFIXES = ["-v2", "-", "--", "--help", "-h", "--suffix", "-=x", "--logdir=elsewhere", '"quoted"', " -x"]


@pytest.mark.parametrize("suffix", OPTION_LIKE_SUFFIXES)
def test_filename_suffix_that_looks_like_an_option(tmp_path, suffix) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir, filename_suffix=suffix) as sw:
        sw.add_scalar("x", 1.0, 0)
        sw.flush(timeout=30)
        assert sw.stats()["last_error"] is None
    (path,) = event_files(logdir)
    assert os.path.basename(path).endswith(suffix)
    mux = load_multiplexer(logdir)
    assert [s for s, _ in tensor_values(mux, ".", "x")] == [0]


@given(
    suffix=st.text(st.characters(codec="utf-8", exclude_characters="/\0"), max_size=30),
    cpus=st.lists(st.integers(0, 512), max_size=4),
)
@example(suffix="-", cpus=[])  # '--' as a value: argparse drops it even as --arena=--
@example(suffix="-v2", cpus=[0])
@settings(max_examples=200, deadline=None)
def test_every_sidecar_option_survives_its_command_line(suffix, cpus) -> None:
    """What the trainer puts on the sidecar's command line, and in its Hello, is what the
    sidecar parses."""
    from mxsidecar.sidecar.process import _parse
    from mxsidecar.training.launch import SidecarOptions
    from mxsidecar.training.remote import RemoteLogdir
    from mxsidecar.wire.handshake import Hello

    # A logdir is absolute and the arena name ours, but nothing here should rely on it.
    opts = SidecarOptions(
        "-" + suffix, "-" + suffix, 0.5, suffix, 7, 3, tuple(cpus), sched_idle=bool(cpus), prefix="-" + suffix
    )
    if cpus:  # a URL logdir: the URL and fsspec's options, text the sidecar must get back unchanged
        opts.remote = RemoteLogdir("s3://b/-" + suffix, {"key": suffix, "client_kwargs": {"n": 1}}, "-" + suffix)
    argv = opts.argv(5, 9 if cpus else -1)
    assert argv[1:3] == ["-m", "mxsidecar.sidecar"]
    got = vars(_parse(argv[3:]))
    cpu_list = ",".join(map(str, cpus))
    assert got == {
        **{"fd": 5, "listen_fd": 9 if cpus else -1, "logdir": "-" + suffix},
        **{"nice": 3, "cpus": cpu_list, "sched_idle": bool(cpus)},
        "remote": "s3://b/-" + suffix if cpus else None,
        "storage_options": {"key": suffix, "client_kwargs": {"n": 1}} if cpus else {},
    }
    hello = Hello.unpack(opts.hello().pack())
    assert (hello.pid, hello.arena, hello.prefix, hello.suffix) == (os.getpid(), "-" + suffix, "-" + suffix, suffix)
    assert (hello.file_index, hello.flush_secs) == (7, 0.5)
