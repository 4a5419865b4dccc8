"""``python -m mxsidecar inspect``: the report of a logdir written by SidecarWriter (and
by hand, for legacy values), damage and truncation, chunk boundaries, the progress bar."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mxsidecar.inspect as mxinspect
from mxsidecar import SidecarWriter
from mxsidecar.__main__ import main
from mxsidecar.formats.proto import event_pb2, summary_pb2, types_pb2
from mxsidecar.formats.records import RecordError, frame, iter_records

pytestmark = pytest.mark.timeout(60)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> str:
    """One logdir with every kind the writer makes, closed before any test runs."""
    logdir = str(tmp_path_factory.mktemp("written"))
    rng = np.random.default_rng(0)
    with SidecarWriter(logdir, purge_step=5) as sw:
        for step in range(10):
            sw.add_scalar("loss", 1.0 / (step + 1), step)
        sw.add_scalars("grp", {"a": 1.5, "b": 2.5}, 3)
        sw.add_scalars("grp", {"a": 0.5, "b": -2.0}, 4)
        sw.add_histogram("w", rng.normal(size=100), 2)
        sw.add_histogram("w", rng.normal(size=100), 6)
        sw.add_text("note", "hello *world*", 1)
        # random pixels: a PNG of ~12 KB, so one record straddles many small chunks
        sw.add_image("img", rng.integers(0, 256, (3, 64, 64)).astype(np.uint8), 7)
        sw.add_pr_curve("pr", rng.integers(0, 2, 50), rng.random(50), global_step=3)
        sw.add_audio("aud", np.zeros(100, dtype=np.float32), 8000, 1)
        sw.add_custom_scalars({"losses": {"all": ["Multiline", ["loss"]]}})
        sw.add_hparams({"lr": 0.1, "opt": "adam"}, {"acc": 0.75}, global_step=9)
    return logdir


@pytest.fixture
def logdir(written, tmp_path) -> str:
    """A copy of ``written`` to damage."""
    out = str(tmp_path / "logs")
    shutil.copytree(written, out)
    return out


def inspect_json(capsys, logdir: str, *args: str) -> tuple[int, dict]:
    code = main(["inspect", logdir, "--json", "--no-progress", *args])
    out = capsys.readouterr().out
    return code, json.loads(out)


def root_file(logdir: str) -> str:
    (name,) = [n for n in os.listdir(logdir) if "tfevents" in n]
    return os.path.join(logdir, name)


def records_of(path: str) -> list:
    with open(path, "rb") as f:
        return list(iter_records(f.read()))


# -- the report ----------------------------------------------------------------
def test_report_of_every_kind(capsys, written) -> None:
    code, rep = inspect_json(capsys, written)
    assert code == 0 and rep["exit_status"] == 0
    assert list(rep["runs"]) == [".", "grp/a", "grp/b"]  # a scalar group is a run per key
    root = rep["runs"]["."]
    kinds = {tag: t["kind"] for tag, t in root["tags"].items()}
    assert kinds == {
        "loss": "scalars",
        "acc": "scalars",  # an hparams metric is a scalar of the run
        "w": "histograms",
        "note": "text",
        "img": "images",
        "pr": "pr_curves",
        "aud": "audio",
        "custom_scalars__config__": "custom_scalars",
        "_hparams_/experiment": "hparams",
        "_hparams_/session_start_info": "hparams",
        "_hparams_/session_end_info": "hparams",
    }
    loss = root["tags"]["loss"]
    assert (loss["count"], loss["step_min"], loss["step_max"]) == (10, 0, 9)
    assert loss["last_value"] == pytest.approx(0.1)  # written as DT_FLOAT
    assert loss["first_wall_time"] <= loss["last_wall_time"]
    assert root["tags"]["acc"]["last_value"] == pytest.approx(0.75)
    w = root["tags"]["w"]
    assert (w["count"], w["step_min"], w["step_max"]) == (2, 2, 6)
    assert "last_value" not in w  # scalars only
    assert root["tags"]["img"]["step_min"] == 7
    # purge_step: two SessionLog STARTs at the purge step
    assert root["session_logs"] == {"START": 2} and root["purge_steps"] == [5]
    assert root["graphs"] == 0
    for name, last in (("grp/a", 0.5), ("grp/b", -2.0)):
        run = rep["runs"][name]
        assert list(run["tags"]) == ["grp"]  # the chart is the main tag
        tag = run["tags"]["grp"]
        assert (tag["kind"], tag["count"], tag["step_min"], tag["step_max"]) == ("scalars", 2, 3, 4)
        assert tag["last_value"] == pytest.approx(last)
    files = [f for run in rep["runs"].values() for f in run["files"]]
    assert len(files) == 3 and rep["summary"]["files"] == 3
    for f in files:
        assert f["status"] == "ok" and f["error"] is None and f["truncated"] is None
        assert f["file_version"] == "brain.Event:2" and f["writer"] == "mxsidecar"
        assert f["size"] == os.path.getsize(os.path.join(written, f["path"]))
    root_path = root["files"][0]["path"]
    assert "/" not in root_path and root["files"][0]["records"] == len(records_of(os.path.join(written, root_path)))
    assert rep["runs"]["grp/a"]["files"][0]["path"].startswith("grp/a/")
    assert rep["summary"]["damaged"] == rep["summary"]["truncated"] == 0


def test_kinds_agree_with_tensorboard(written) -> None:
    """TensorBoard (the judge) files each tag under the plugin we name as its kind."""
    pytest.importorskip("tensorboard")
    from conftest import load_multiplexer

    rep = mxinspect.inspect_logdir(written)
    mux = load_multiplexer(written)
    plugins = {t.kind for r in rep.runs.values() for t in r.tags.values()}
    for plugin in plugins:
        theirs = {(run, tag) for run, tags in mux.PluginRunToTagToContent(plugin).items() for tag in tags}
        ours = {(run, tag) for run, r in rep.runs.items() for tag, t in r.tags.items() if t.kind == plugin}
        assert ours == theirs, plugin


def test_human_tables(capsys, written) -> None:
    code = main(["inspect", written, "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "run .\n" in out and "run grp/a\n" in out and "run grp/b\n" in out
    loss = next(line for line in out.splitlines() if line.split()[:1] == ["loss"])
    assert loss.split()[1:4] == ["scalars", "10", "0..9"] and loss.split()[-1] == "0.1"
    assert "session log START 2; purge at step 5" in out
    assert "3 event file(s): 3 ok, 0 empty, 0 with a truncated tail (tolerated), 0 damaged" in out


def _value(tag: str, **kw) -> summary_pb2.Summary.Value:
    return summary_pb2.Summary.Value(tag=tag, **kw)


def _with_plugin(value: summary_pb2.Summary.Value, plugin: str) -> summary_pb2.Summary.Value:
    value.metadata.plugin_data.plugin_name = plugin
    return value


def _write_events(path: str, events: list[event_pb2.Event]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        for ev in events:
            f.write(frame(ev.SerializeToString()))


def test_legacy_values_graphs_and_metadata_rules(tmp_path, capsys) -> None:
    """What other writers put in files: legacy values, graphs, tensors without plugin."""

    def summary(step: int, *values: summary_pb2.Summary.Value) -> event_pb2.Event:
        return event_pb2.Event(wall_time=100.0 + step, step=step, summary=summary_pb2.Summary(value=list(values)))

    double = _value("double", tensor={"dtype": types_pb2.DT_DOUBLE, "double_val": [2.5]})
    content = _value("content", tensor={"dtype": types_pb2.DT_FLOAT, "tensor_content": np.float32(-3).tobytes()})
    events = [
        event_pb2.Event(wall_time=99.0, file_version="brain.Event:2"),
        summary(0, _value("simple", simple_value=1.0), _value("h", histo={"num": 3.0})),
        summary(1, _value("simple", simple_value=4.0), _value("pic", image={"height": 1, "width": 1})),
        summary(2, _value("snd", audio={"sample_rate": 8000.0}), _value("raw", tensor={"dtype": types_pb2.DT_FLOAT})),
        summary(3, _with_plugin(double, "scalars"), _with_plugin(content, "scalars")),
        summary(4, _with_plugin(_value("mesh", tensor={}), "mesh")),
        # TensorBoard keeps a tag's first metadata: the later plugin does not count ...
        summary(5, _with_plugin(_value("double", tensor={"dtype": types_pb2.DT_DOUBLE, "double_val": [7.0]}), "text")),
        # ... and a value without metadata leaves the kind open until one comes
        summary(6, _value("late", tensor={})),
        summary(7, _with_plugin(_value("late", tensor={}), "text")),
        # old tensor summaries named themselves in node_name
        summary(8, _with_plugin(_value("", node_name="old", tensor={}), "text")),
        event_pb2.Event(wall_time=110.0, step=0, graph_def=b"\x0a\x00"),
        event_pb2.Event(wall_time=111.0, step=3, tagged_run_metadata={"tag": "step3", "run_metadata": b""}),
        event_pb2.Event(wall_time=112.0, step=2, session_log={"status": event_pb2.SessionLog.START}),
        event_pb2.Event(wall_time=113.0, step=2, session_log={"status": event_pb2.SessionLog.STOP}),
    ]
    _write_events(str(tmp_path / "run1" / "x.tfevents.1"), events)
    code, rep = inspect_json(capsys, str(tmp_path))
    assert code == 0 and list(rep["runs"]) == ["run1"]
    run = rep["runs"]["run1"]
    kinds = {tag: t["kind"] for tag, t in run["tags"].items()}
    assert kinds == {
        "simple": "scalars",
        "h": "histograms",
        "pic": "images",
        "snd": "audio",
        "raw": "tensor",
        "double": "scalars",
        "content": "scalars",
        "mesh": "mesh",
        "late": "text",
        "old": "text",
        "step3": "graph",
    }
    assert run["tags"]["simple"]["last_value"] == 4.0
    assert run["tags"]["simple"]["first_wall_time"] == 100.0 and run["tags"]["simple"]["last_wall_time"] == 101.0
    assert run["tags"]["double"]["last_value"] == 7.0 and run["tags"]["double"]["count"] == 2
    assert run["tags"]["content"]["last_value"] == -3.0
    assert run["graphs"] == 1
    assert run["session_logs"] == {"START": 1, "STOP": 1} and run["purge_steps"] == [2]
    (f,) = run["files"]
    assert f["records"] == len(events) and f["file_version"] == "brain.Event:2" and f["writer"] == ""


def test_non_finite_scalars_are_valid_json(tmp_path, capsys) -> None:
    events = [
        event_pb2.Event(step=s, summary={"value": [_value(tag, simple_value=x)]})
        for s, (tag, x) in enumerate([("nan", float("nan")), ("inf", float("inf")), ("ninf", float("-inf"))])
    ]
    _write_events(str(tmp_path / "events.out.tfevents.1"), events)
    code = main(["inspect", str(tmp_path), "--json", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    tags = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))["runs"]["."]["tags"]
    assert [tags[t]["last_value"] for t in ("nan", "inf", "ninf")] == ["NaN", "Infinity", "-Infinity"]


# -- integrity -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "what"),
    [
        ("middle", None),
        ("length", "length checksum mismatch"),
        ("length_crc", "length checksum mismatch"),
        ("data", "data checksum mismatch"),
        ("data_crc", "data checksum mismatch"),
    ],
)
def test_flipped_byte_is_damage_at_its_record(capsys, logdir, where, what) -> None:
    path = root_file(logdir)
    recs = records_of(path)
    size = os.path.getsize(path)
    if where == "middle":
        pos = size // 2
    else:
        rec = recs[len(recs) // 2]
        pos = {"length": 0, "length_crc": 9, "data": 12 + len(rec.data) // 2, "data_crc": 12 + len(rec.data) + 1}
        pos = rec.offset + pos[where]
    bad = max(i for i, r in enumerate(recs) if r.offset <= pos)  # the record holding the byte
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x40]))

    code, rep = inspect_json(capsys, logdir)
    assert code == 1 and rep["exit_status"] == 1
    (f,) = rep["runs"]["."]["files"]
    assert f["status"] == "damaged" and f["error"]["offset"] == recs[bad].offset
    if what is not None:
        assert f["error"]["message"] == what
    assert f["records"] == bad  # every record before the bad one was read
    assert rep["summary"]["damaged"] == 1 and rep["summary"]["ok"] == 2
    for run in ("grp/a", "grp/b"):  # the other files are read all the same
        assert rep["runs"][run]["files"][0]["status"] == "ok"
        assert rep["runs"][run]["tags"]["grp"]["count"] == 2

    assert main(["inspect", logdir, "--no-progress"]) == 1
    assert f"DAMAGED at byte {recs[bad].offset}" in capsys.readouterr().out


def test_record_that_is_not_an_event_is_damage(tmp_path, capsys) -> None:
    path = str(tmp_path / "events.out.tfevents.1")
    good = frame(event_pb2.Event(file_version="brain.Event:2").SerializeToString())
    with open(path, "wb") as f:
        f.write(good + frame(b"\xff\xff\xff"))  # right checksums, not a protobuf
    code, rep = inspect_json(capsys, str(tmp_path))
    (f,) = rep["runs"]["."]["files"]
    assert code == 1 and f["status"] == "damaged" and f["error"]["offset"] == len(good) and f["records"] == 1
    assert "not an Event" in f["error"]["message"]


@pytest.mark.parametrize("cut", [1, 3, 4, 8, "header"])
def test_truncated_tail_is_tolerated(capsys, logdir, cut) -> None:
    path = root_file(logdir)
    recs = records_of(path)
    last = recs[-1]
    size = os.path.getsize(path)
    new_size = last.offset + 5 if cut == "header" else size - int(cut)
    os.truncate(path, new_size)

    code, rep = inspect_json(capsys, logdir)
    assert code == 0 and rep["exit_status"] == 0
    (f,) = rep["runs"]["."]["files"]
    assert f["status"] == "truncated" and f["error"] is None
    assert f["truncated"] == {"offset": last.offset, "bytes": new_size - last.offset}
    assert f["records"] == len(recs) - 1 and f["size"] == new_size
    assert rep["summary"]["truncated"] == 1
    assert main(["inspect", logdir, "--no-progress"]) == 0
    assert f"truncated tail at byte {last.offset}" in capsys.readouterr().out


def test_empty_file_and_other_files(capsys, logdir) -> None:
    open(os.path.join(logdir, "events.out.tfevents.0000000000.new"), "wb").close()
    with open(os.path.join(logdir, "notes.txt"), "w") as f:
        f.write("not an event file")
    with open(os.path.join(logdir, "checkpoint"), "wb") as f:
        f.write(os.urandom(100))
    os.makedirs(os.path.join(logdir, "old.tfevents.d"))  # a directory is no event file

    code, rep = inspect_json(capsys, logdir)
    assert code == 0
    files = [os.path.basename(f["path"]) for f in rep["runs"]["."]["files"]]
    assert files[0] == "events.out.tfevents.0000000000.new" and len(files) == 2
    empty = rep["runs"]["."]["files"][0]
    assert (empty["status"], empty["records"], empty["size"], empty["file_version"]) == ("empty", 0, 0, "")
    assert list(rep["runs"]) == [".", "grp/a", "grp/b"]
    assert rep["summary"]["empty"] == 1 and rep["summary"]["ok"] == 3


def test_usage_errors(tmp_path, capsys) -> None:
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["inspect", str(tmp_path / "notes.txt")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "sub").mkdir()
    assert main(["inspect", str(tmp_path), "--json"]) == 2
    captured = capsys.readouterr()
    assert "no event files" in captured.err and captured.out == ""
    with pytest.raises(SystemExit) as exc:
        main([])  # a command is required
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "inspect" in capsys.readouterr().out


# -- chunk boundaries -------------------------------------------------------------
@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 12, 13, 16, 17, 1000, 4096])
def test_tiny_chunks_report_like_a_whole_file_read(written, chunk) -> None:
    whole = mxinspect.inspect_logdir(written, chunk_size=1 << 30).to_json()
    assert mxinspect.inspect_logdir(written, chunk_size=chunk).to_json() == whole
    # and the parser yields exactly iter_records' records over the whole buffer
    with open(root_file(written), "rb") as f:
        data = f.read()
    assert max(len(r.data) for r in iter_records(data)) > 10_000  # the image record spans chunks
    parser = mxinspect.RecordParser()
    got = [r for i in range(0, len(data), chunk) for r in parser.feed(data[i : i + chunk])]
    assert parser.finish() is None
    assert got == list(iter_records(data))


def _frames(payloads: list[bytes]) -> bytes:
    return b"".join(frame(p) for p in payloads)


def _parse_in_pieces(data: bytes, cuts: list[int]) -> tuple[list, object]:
    """Records, then the RecordError raised or the tail finish() returned."""
    parser = mxinspect.RecordParser()
    got = []
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    try:
        for a, b in zip(bounds, bounds[1:]):
            got += parser.feed(data[a:b])
        return got, parser.finish()
    except RecordError as e:
        return got, e


@settings(max_examples=150, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=40), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
    damage=st.one_of(st.none(), st.integers(min_value=0, max_value=10_000)),
    cut_tail=st.integers(min_value=0, max_value=30),
)
def test_parser_matches_whole_buffer_reader(payloads, cuts, damage, cut_tail) -> None:
    """However the bytes are split: the records, the damage offset and the truncated
    tail of a whole-buffer read."""
    data = bytearray(_frames(payloads))
    if damage is not None:
        data[damage % len(data)] ^= 0x01
    data = bytes(data[: max(0, len(data) - cut_tail)])

    expected, expected_end = [], None
    try:
        for rec in iter_records(data, strict=True):
            expected.append(rec)
    except RecordError as e:  # TruncatedRecord included
        expected_end = e
    got, end = _parse_in_pieces(data, cuts)
    assert got == expected
    if expected_end is None:
        assert end is None
    else:
        assert type(end) is type(expected_end) and end.offset == expected_end.offset


def test_parser_returns_good_records_before_raising() -> None:
    good = _frames([b"a", b"bb"])
    bad = bytearray(frame(b"ccc"))
    bad[-1] ^= 0xFF
    parser = mxinspect.RecordParser(start=100)
    assert [(r.offset, r.data) for r in parser.feed(good + bytes(bad))] == [(100, b"a"), (117, b"bb")]
    with pytest.raises(RecordError) as exc:
        parser.feed(b"")
    assert exc.value.offset == 100 + len(good)
    with pytest.raises(RecordError):
        parser.finish()


# -- projector --------------------------------------------------------------------
def test_projector_configs(capsys, logdir) -> None:
    emb = os.path.join(logdir, "00000", "emb")
    os.makedirs(emb)
    with open(os.path.join(emb, "tensors.tsv"), "w") as f:
        f.write("1\t2\n3\t4\n")
    with open(os.path.join(logdir, "projector_config.pbtxt"), "w") as f:
        f.write(
            'embeddings { tensor_name: "emb:00000" tensor_path: "00000/emb/tensors.tsv" '
            'metadata_path: "00000/emb/metadata.tsv" }\n'
            'embeddings { tensor_name: "out" tensor_path: "../elsewhere.tsv" }\n'
        )
    os.makedirs(os.path.join(logdir, "lonely"))
    with open(os.path.join(logdir, "lonely", "projector_config.pbtxt"), "w") as f:
        f.write("embeddings { tensor_name: ")  # does not parse

    code, rep = inspect_json(capsys, logdir)
    assert code == 0  # the exit status is about event files
    configs = {p["path"]: p for p in rep["projector"]}
    assert set(configs) == {"projector_config.pbtxt", "lonely/projector_config.pbtxt"}
    root = configs["projector_config.pbtxt"]
    assert root["seen_by_tensorboard"] and root["error"] is None
    first, out = root["embeddings"]
    assert first["tensor_name"] == "emb:00000"
    assert [(f["field"], f["exists"], f["inside"]) for f in first["files"]] == [
        ("tensor_path", True, True),
        ("metadata_path", False, True),
    ]
    assert [(f["field"], f["inside"]) for f in out["files"]] == [("tensor_path", False)]
    lonely = configs["lonely/projector_config.pbtxt"]
    assert not lonely["seen_by_tensorboard"] and lonely["error"]

    assert main(["inspect", logdir, "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "metadata_path 00000/emb/metadata.tsv MISSING" in text and "tensor_path 00000/emb/tensors.tsv ok" in text
    assert "does not parse" in text


# -- progress and the command line ------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_redraws_at_most_ten_times_a_second() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    bar = mxinspect.Progress(stream, clock=clock)
    bar.start(100_000)
    for _ in range(10_000):  # a burst of tiny chunks: no redraw
        bar.advance(1)
    assert bar.draws == 1
    for _ in range(900):  # 9 s at 100 chunks a second
        clock.now += 0.01
        bar.advance(100)
    assert 80 <= bar.draws <= 1 + 90  # ~10 a second, never more
    bar.close()
    lines = stream.getvalue()
    assert lines.endswith("100% 97.7 KiB / 97.7 KiB\n") and lines.count("\r") == bar.draws


def test_command_line_in_a_subprocess(written) -> None:
    """``python -m mxsidecar inspect``: the bar goes to stderr, the JSON to stdout."""
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "mxsidecar", "inspect", written, "--json"]
    proc = subprocess.run([*cmd, "--progress"], capture_output=True, timeout=60, env=env, cwd=REPO)
    out, err = proc.stdout.decode(), proc.stderr.decode()  # bytes: text mode would turn '\r' into '\n'
    assert proc.returncode == 0, err
    assert "\r" not in out and "inspect [" not in out
    report = json.loads(out)
    assert report["summary"]["files"] == 3 and report["exit_status"] == 0
    size = mxinspect.reporting._human(report["summary"]["bytes"])
    assert err.startswith("\rinspect [") and err.endswith(f"] 100% {size} / {size}\n")


def test_no_progress_bar_unless_asked_or_a_terminal(capsys, written) -> None:
    assert main(["inspect", written, "--json"]) == 0  # capsys' stderr is no terminal
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)["exit_status"] == 0
    assert main(["inspect", written, "--progress"]) == 0
    captured = capsys.readouterr()
    assert "100%" in captured.err and "\r" not in captured.out
