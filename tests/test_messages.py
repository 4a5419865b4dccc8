"""Descriptor and reply layouts, and stream framing split at every byte."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mxsidecar.wire.descriptors import (
    DTYPE_CODES,
    Descriptor,
    ErrorReport,
    Kind,
    Notice,
    Op,
    Opened,
    Progress,
    StatsReply,
    decode_reply,
    pack_descriptor,
)
from mxsidecar.wire.framing import FrameDecoder, encode_frames

texts = st.text(max_size=40)
descriptors = st.builds(
    Descriptor,
    op=st.sampled_from(list(Op)[:5]),
    seq=st.integers(0, 2**64 - 1),
    kind=st.sampled_from(list(Kind)),
    tag=texts,
    step=st.integers(-(2**63), 2**63 - 1),
    wall_time=st.floats(allow_nan=False),
    run=texts,
    number=st.floats(allow_nan=False),
    text=st.text(max_size=200),
    offset=st.integers(0, 2**64 - 1),
    nbytes=st.integers(0, 2**64 - 1),
    dtype=st.sampled_from(sorted(DTYPE_CODES)),
    shape=st.lists(st.integers(0, 2**40), max_size=6).map(tuple),
    options=st.none()
    | st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), min_size=1, max_size=3),
)


@given(descriptors)
def test_descriptor_round_trip(d: Descriptor) -> None:
    assert Descriptor.unpack(d.pack()) == d


def test_pack_descriptor_matches_dataclass() -> None:
    d = Descriptor(Op.ITEM, 7, Kind.HISTOGRAM, "w", 3, 1.5, "r", 0.0, "", 64, 400, "float32", (10, 10), {"bins": 30})
    assert (
        pack_descriptor(
            Op.ITEM, 7, Kind.HISTOGRAM, "w", 3, 1.5, "r", 0.0, "", 64, 400, "float32", (10, 10), {"bins": 30}
        )
        == d.pack()
    )


def test_nan_scalar_survives() -> None:
    d = Descriptor.unpack(Descriptor(Op.ITEM, 1, Kind.SCALAR, "x", number=float("nan")).pack())
    assert d.number != d.number


def test_replies_round_trip() -> None:
    for r in (
        Progress(12),
        ErrorReport("Traceback ...\nValueError: x"),
        Notice(3, 2, "t", "bad"),
        StatsReply(9, {"a": 1}),
        Opened("/logs/run/events.out.tfevents.1.h.2.0-v2"),
        Opened("/logs/\udcff\u00e9/f"),  # not UTF-8 on disk (surrogate-escaped), and UTF-8
    ):
        assert decode_reply(r.pack()) == r


@given(st.lists(st.binary(max_size=50), max_size=10), st.integers(1, 17))
def test_frame_decoder_any_split(payloads: list[bytes], chunk: int) -> None:
    stream = encode_frames(payloads)
    dec = FrameDecoder()
    got: list[bytes] = []
    for i in range(0, len(stream), chunk):
        got += dec.feed(stream[i : i + chunk])
    assert got == payloads
    assert dec.pending == 0
