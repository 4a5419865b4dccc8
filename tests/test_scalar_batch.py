"""The scalar fast path: SCALARS frames (wire/descriptors.py), packed by the completion
thread (training/completion.py) and written by the sidecar straight to records
(sidecar/batch.py).  TensorBoard is the judge of the bytes; the file's order is the
order logged, scalars mixed with other kinds; a sidecar killed with values in flight
leaves exactly the values it reported, and the trainer counts the rest lost."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from conftest import event_files, load_multiplexer, read_events, tensor_values
from hypothesis import given, settings
from hypothesis import strategies as st
from test_scalar_bytes import tensorboards_bytes

from mxsidecar import SidecarError, SidecarWriter
from mxsidecar.formats import records
from mxsidecar.sidecar.batch import write_scalars
from mxsidecar.sidecar.faults import ENV
from mxsidecar.sidecar.output.event_file import EventFile
from mxsidecar.training import completion
from mxsidecar.training.completion import BURST_ITEMS, MAX_BATCH, SCALARS_PER_FRAME, STOP, CompletionThread
from mxsidecar.wire.descriptors import SCALARS_OP, Descriptor, Kind, Op, pack_scalar_entry, unpack_frame

pytestmark = pytest.mark.timeout(120)
INT64_MAX = 2**63 - 1


def _no_backwards(*args: object) -> None:
    raise AssertionError(f"no step goes backwards here: {args}")


entries = st.lists(
    st.tuples(
        st.one_of(st.just(0.0), st.floats(min_value=0, max_value=4e9)),  # wall_time
        st.one_of(st.integers(0, 300), st.integers(0, 2**22), st.integers(0, INT64_MAX)),  # step
        st.sampled_from(["loss", "acc", "a/b", "lr", "é"]) | st.text(min_size=1, max_size=200),  # tag
        st.sampled_from(["", "", "", "run_a", "run_b/x"]),  # run
        st.floats(width=64, allow_nan=False),  # value: beyond float32's range too
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(entries=entries)
def test_a_scalars_frame_writes_tensorboards_records(tmp_path_factory, entries) -> None:
    """Every record is TensorBoard's own serialization framed as TFRecord, metadata on a
    tag's first value in each run's file only, in the order of the entries."""
    logdir = tmp_path_factory.mktemp("frame")
    files: dict[str, EventFile] = {}

    def file_for(run: str) -> EventFile:
        if run not in files:
            files[run] = EventFile(str(logdir / run), wall_time=1.0, pid=1, index=0)
        return files[run]

    frame = SCALARS_OP + b"".join(pack_scalar_entry(i + 1, s, w, v, t, r) for i, (w, s, t, r, v) in enumerate(entries))
    went_back: list[tuple[str, str, int, int, int]] = []
    last_steps: dict[str, dict[str, int]] = {}
    count, last, nbytes = write_scalars(
        frame, file_for, last_steps, lambda f, tag, step, prev, seq: went_back.append((f.path, tag, step, prev, seq))
    )
    assert (count, last) == (len(entries), len(entries))
    expected: dict[str, list[bytes]] = {}
    seen: set[tuple[str, str]] = set()
    steps: dict[tuple[str, str], int] = {}
    backwards: list[tuple[str, str, int, int, int]] = []  # every value below its tag's last step in its run
    for seq, (wall_time, step, tag, run, value) in enumerate(entries, 1):
        first = (run, tag) not in seen
        seen.add((run, tag))
        if (run, tag) in steps and step < steps[run, tag]:
            backwards.append((files[run].path, tag, step, steps[run, tag], seq))
        steps[run, tag] = step
        expected.setdefault(run, []).append(records.frame(tensorboards_bytes(wall_time, step, tag, value, first)))
    for run, f in files.items():
        f.close()
        with open(f.path, "rb") as fh:
            data = fh.read()
        first_record = next(records.iter_records(data))
        assert data[first_record.offset + 12 + len(first_record.data) + 4 :] == b"".join(expected[run])
        nbytes -= len(data) - (first_record.offset + 12 + len(first_record.data) + 4)
        assert f.records == 1 + len(expected[run])
    assert set(files) == set(expected)
    assert went_back == backwards
    assert nbytes == 0  # the bytes reported are those of the records appended, every one
    assert last_steps == {files[r].path: {t: s for (rr, t), s in steps.items() if rr == r} for r in files}


def test_unpack_frame_gives_the_descriptors_it_stands_for() -> None:
    frame = SCALARS_OP + pack_scalar_entry(7, 3, 1.5, -2.0, "loss") + pack_scalar_entry(8, 4, 2.5, 1e300, "é", "r")
    assert unpack_frame(frame) == [
        Descriptor(Op.ITEM, 7, Kind.SCALAR, "loss", 3, 1.5, "", -2.0),
        Descriptor(Op.ITEM, 8, Kind.SCALAR, "é", 4, 2.5, "r", 1e300),
    ]
    other = Descriptor(Op.FLUSH, 9).pack()
    assert unpack_frame(other) == [Descriptor(Op.FLUSH, 9)]


@pytest.mark.parametrize("cut", [1, 5, 39, 40, 43])  # an entry of tag "loss" is 44 bytes
def test_a_frame_cut_inside_an_entry_is_refused(tmp_path, cut) -> None:
    whole = pack_scalar_entry(1, 1, 1.0, 1.0, "loss")
    frame = SCALARS_OP + whole + pack_scalar_entry(2, 2, 1.0, 2.0, "loss")[:cut]
    with pytest.raises(ValueError, match="ends inside"):
        unpack_frame(frame)
    f = EventFile(str(tmp_path), wall_time=1.0, pid=1, index=0)
    with pytest.raises(ValueError, match="ends inside an entry"):
        write_scalars(frame, lambda run: f, {}, _no_backwards)
    assert f.records == 2  # the first event and the whole entry before the cut


def completion_frames(items: list[tuple]) -> list[bytes]:
    """What the completion thread sends for ``items``, queued at once."""
    sent: list[bytes] = []
    t = CompletionThread(lambda payloads, last: sent.extend(payloads), lambda exc: sent.append(repr(exc).encode()))
    for item in items:
        t.put(item)
    t.put(STOP)
    t.run()  # in this thread: the queue holds everything already
    return sent


def scalar_item(seq: int, tag: str = "loss", run: str = "", number: float = 0.5) -> tuple:
    return (Op.ITEM, seq, Kind.SCALAR, tag, seq, 1.0, run, number, "", 0, 0, "", (), None, None)


def test_the_completion_thread_packs_runs_of_scalars_in_order() -> None:
    """Scalars between other items become SCALARS frames cut at those items (and at
    SCALARS_PER_FRAME values); expanded, the frames are the items, in seq order."""
    n = SCALARS_PER_FRAME + 5
    items = [scalar_item(i) for i in range(1, n + 1)]
    items.append((Op.ITEM, n + 1, Kind.TEXT, "t", 0, 1.0, "", 0.0, "hello", 0, 0, "", (), None, None))
    items.append(scalar_item(n + 2, "acc", "run_a"))
    items.append((Op.ITEM, n + 3, Kind.SCALAR, "arr", 0, 1.0, "", 0.0, "", 64, 4, "float32", (1,), None, None))
    items.append(scalar_item(n + 4))
    items.append((Op.FLUSH, n + 5, 0, "", 0, 0.0, "", 0.0, "", 0, 0, "", (), None, None))
    frames = completion_frames(items)
    kinds = ["scalars" if fr[:1] == SCALARS_OP else Descriptor.unpack(fr).op.name for fr in frames]
    assert kinds == ["scalars", "scalars", "ITEM", "scalars", "ITEM", "scalars", "FLUSH"]
    assert [len(unpack_frame(fr)) for fr in frames] == [SCALARS_PER_FRAME, 5, 1, 1, 1, 1, 1]
    descs = [d for fr in frames for d in unpack_frame(fr)]
    assert [d.seq for d in descs] == list(range(1, n + 6))
    assert [d.pack() for d in descs] == [Descriptor(*item[:-1]).pack() for item in items]


# -- through the whole pipeline ----------------------------------------------------------


def test_scalars_mixed_with_other_kinds_reach_the_file_in_the_order_logged(tmp_path) -> None:
    logdir = str(tmp_path)
    logged = []
    with SidecarWriter(logdir, max_queue=64) as sw:  # a small queue: the caller waits, batches vary
        for i in range(600):
            sw.add_scalar("loss", 1.0 / (i + 1), i)
            logged.append(("loss", i))
            if i % 7 == 0:
                sw.add_histogram("h", np.arange(10, dtype=np.float32) + i, i)
                logged.append(("h", i))
            if i % 11 == 0:
                sw.add_text("note", f"step {i}", i)
                logged.append(("note", i))
            if i % 13 == 0:
                sw.add_scalar("acc", float(i), i)
                logged.append(("acc", i))
    (path,) = event_files(logdir)
    in_file = [(v.tag, ev.step) for ev in read_events(path) for v in ev.summary.value]
    assert in_file == logged
    mux = load_multiplexer(logdir)
    values = tensor_values(mux, ".", "loss")
    assert [s for s, _ in values] == list(range(600))
    assert all(float(v) == np.float32(1.0 / (s + 1)) for s, v in values)


def test_add_scalars_runs_and_extreme_values_read_back_with_tensorboard(tmp_path) -> None:
    logdir = str(tmp_path)
    with SidecarWriter(logdir) as sw:
        for i in range(300):
            sw.add_scalars("m", {"a": float(i), "b": -float(i)}, i * 100_003)
            sw.add_scalar("big", 1e300 if i % 2 else -1e300, i)
            sw.add_scalar("nan", math.nan, i)
    mux = load_multiplexer(logdir)
    assert [(s, float(v)) for s, v in tensor_values(mux, "m/a", "m")] == [(i * 100_003, float(i)) for i in range(300)]
    assert [float(v) for _, v in tensor_values(mux, "m/b", "m")] == [-float(i) for i in range(300)]
    big = [math.inf if i % 2 else -math.inf for i in range(300)]  # beyond float32: infinities, as protobuf
    assert [float(v) for _, v in tensor_values(mux, ".", "big")] == big
    assert all(math.isnan(float(v)) for _, v in tensor_values(mux, ".", "nan"))
    # metadata only on each tag's first value in each file
    for path in event_files(logdir):
        with_md = [v.tag for ev in read_events(path) for v in ev.summary.value if v.HasField("metadata")]
        assert len(with_md) == len(set(with_md))


@pytest.mark.parametrize("max_queue,per_frame", [(1024, SCALARS_PER_FRAME), (64, 32), (3, 1), (1, 1)])
def test_a_frame_holds_at_most_half_the_queue(tmp_path, max_queue: int, per_frame: int) -> None:
    """The pipeline caps a SCALARS frame at half its max_queue (and SCALARS_PER_FRAME):
    the sidecar reports progress once per frame, and a caller blocked on a full queue
    must hear of a frame written while the other half still waits, or it refills the
    queue only after the sidecar has gone idle."""
    sw = SidecarWriter(str(tmp_path), max_queue=max_queue)
    try:
        assert sw._pipe.completion.frame_values == per_frame
    finally:
        sw.close()
    if per_frame >= MAX_BATCH:
        return  # a batch holds MAX_BATCH items: it cuts there anyway, the cap is not what cuts
    sent: list[bytes] = []
    t = CompletionThread(lambda payloads, last: sent.extend(payloads), lambda exc: None, per_frame)
    for seq in range(1, 2 * per_frame + 2):
        t.put(scalar_item(seq))
    t.put(STOP)
    t.run()
    assert [len(unpack_frame(fr)) for fr in sent] == [per_frame, per_frame, 1]


@pytest.mark.parametrize("at", ["encode", "write"])
@pytest.mark.parametrize("after", [0, 3, 10])
def test_a_sidecar_killed_mid_stream_leaves_what_it_reported(tmp_path, monkeypatch, at, after) -> None:
    """The sidecar kills itself while scalars stream in: as it builds a frame's records
    (``encode``, the n-th value) or as it writes them (``write``, the n-th write, which
    leaves half its bytes: a crash mid-write).  Every value it reported done is in the
    file, whole and in order; the trainer counts every other value lost, and the two add
    up to what was logged.  Only the write it died in may have put more on disk than it
    reported (never more than one frame)."""
    n = 20 * SCALARS_PER_FRAME
    skip = after * 50 if at == "encode" else after + 1  # +1: the file's first event is a write too
    monkeypatch.setenv(ENV, json.dumps([{"at": at, "action": "kill", "after": skip}]))
    logdir = str(tmp_path)
    sw = SidecarWriter(logdir)
    logged = 0
    with pytest.raises(SidecarError, match="SIGKILL"):
        try:
            for i in range(n):
                sw.add_scalar("x", float(i), i)
                logged += 1
        finally:
            sw.close()
    counts = sw._pipe.item_counts()
    assert counts["written"] + counts["lost"] == logged
    assert counts["lost"] > 0
    steps = [ev.step for path in event_files(logdir) for ev in read_events(path, strict=False) if ev.summary.value]
    assert steps == list(range(len(steps)))
    if at == "encode":
        assert len(steps) == counts["written"]
    else:
        assert counts["written"] <= len(steps) < counts["written"] + SCALARS_PER_FRAME


def test_whole_records_length_stops_at_the_last_whole_record() -> None:
    recs = [records.frame(bytes([i]) * (i * 7)) for i in range(1, 6)]
    data = b"".join(recs)
    ends = [sum(len(r) for r in recs[: k + 1]) for k in range(len(recs))]
    for cut in range(len(data) + 1):
        assert records.whole_records_length(data[:cut]) == max([0] + [e for e in ends if e <= cut])


def test_frame_is_tensorflows_record_layout() -> None:
    data = b"event bytes"
    rec = records.frame(data)
    (length,) = struct.unpack_from("<Q", rec)
    assert length == len(data) and rec[12:-4] == data
    assert struct.unpack_from("<I", rec, 8)[0] == records.masked_crc32c(rec[:8])
    assert struct.unpack_from("<I", rec, len(rec) - 4)[0] == records.masked_crc32c(data)
    assert records.frame(data) == rec  # the cached header gives the same bytes


def test_a_url_logdirs_spool_files_roll_between_values_each_with_its_metadata(tmp_path, monkeypatch) -> None:
    """A URL logdir's spool files roll over at ROLL_BYTES (output/remote.py): the fast
    path rolls them where appending value by value would (past the limit by at most the
    record that crossed it), and each new file gets each tag's metadata again."""
    pytest.importorskip("fsspec")  # a URL logdir's extra (not in every stack)
    roll = 4096
    monkeypatch.setenv("MXSIDECAR_ROLL_BYTES", str(roll))  # a new file every ~45 values
    spool = tmp_path / "spool"
    with SidecarWriter("memory://bkt/run", spool_dir=str(spool), flush_secs=60) as sw:
        for i in range(1000):
            sw.add_scalar("loss", float(i), i)
            sw.add_scalar("acc", -float(i), i)
    files = event_files(str(spool))
    assert len(files) >= 1000 * 2 * 45 // roll
    steps: dict[str, list[int]] = {"loss": [], "acc": []}
    for path in files:
        with open(path, "rb") as fh:
            data = fh.read()
        last = list(records.iter_records(data))[-1]
        assert last.offset < roll  # the record that crossed the limit is the file's last
        seen: set[str] = set()
        for ev in read_events(path):
            for v in ev.summary.value:
                assert v.HasField("metadata") == (v.tag not in seen), (path, v.tag, ev.step)
                seen.add(v.tag)
                steps[v.tag].append(ev.step)
    assert steps == {"loss": list(range(1000)), "acc": list(range(1000))}


@pytest.mark.parametrize("first_batch,sleeps", [(BURST_ITEMS, 1), (BURST_ITEMS - 1, 2)])
def test_no_batching_delay_within_a_sustained_burst(monkeypatch, first_batch, sleeps) -> None:
    """The completion thread waits BATCH_DELAY for company after a quiet spell, not
    after a batch of BURST_ITEMS or more (a caller refilling a full queue): that delay
    would leave the sidecar idle while the caller waits.  No clock: sleeps are counted."""
    slept: list[float] = []
    monkeypatch.setattr(completion.time, "sleep", slept.append)
    t: CompletionThread

    def send(payloads: list[bytes], last: int) -> None:
        if last == first_batch:  # the caller logs again once the first batch is out
            t.put(scalar_item(last + 1))
            t.put(STOP)

    t = CompletionThread(send, lambda exc: None)
    for i in range(1, first_batch + 1):
        t.put(scalar_item(i))
    t.run()
    assert len(slept) == sleeps
