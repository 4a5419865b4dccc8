"""TFRecord framing checked against TensorBoard's own writer and CRC."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mxsidecar.formats.records import RecordError, TruncatedRecord, frame, iter_records, masked_crc32c


@given(st.binary(max_size=4096))
def test_masked_crc_matches_tensorboard(data: bytes) -> None:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_masked

    assert masked_crc32c(data) == tb_masked(data)


@given(st.lists(st.binary(max_size=300), max_size=20))
def test_frames_are_byte_identical_to_tensorboard_record_writer(payloads: list[bytes]) -> None:
    from tensorboard.summary.writer.record_writer import RecordWriter

    buf = io.BytesIO()
    w = RecordWriter(buf)
    for p in payloads:
        w.write(p)
    assert b"".join(frame(p) for p in payloads) == buf.getvalue()
    assert [r.data for r in iter_records(buf.getvalue())] == payloads


# RFC 3720 B.4's CRC32C test data, masked as TensorFlow masks record CRCs.  The masked
# values were computed once with TensorBoard's own masked_crc32c and are frozen here: a
# known vector, not the masking formula written again (which would only check itself).
KNOWN_MASKED = [
    (bytes(32), 0x0FD7FFFA),  # raw CRC32C 0x8A9136AA (RFC 3720)
    (b"\xff" * 32, 0xF909B029),  # raw 0x62A8AB43
    (bytes(range(32)), 0x951F7892),  # raw 0x46DD794E
    (bytes(range(31, -1, -1)), 0x593B0D57),  # raw 0x113FDB5C
    (b"123456789", 0xC78AB0E5),  # raw 0xE3069283, the standard check value
]


@pytest.mark.parametrize(("data", "masked"), KNOWN_MASKED)
def test_known_vector(data: bytes, masked: int) -> None:
    assert masked_crc32c(data) == masked


def test_known_record() -> None:
    # TensorBoard's RecordWriter(buf).write(b"hello"), frozen: length, its masked CRC,
    # the data, the data's masked CRC, all little-endian.
    want = b"\x05\x00\x00\x00\x00\x00\x00\x00\xea\xb2\x04>hello\xbb\x1f\x1c\x19"
    assert frame(b"hello") == want
    assert [r.data for r in iter_records(want)] == [b"hello"]


def test_every_flipped_byte_is_detected() -> None:
    good = frame(b"hello world") + frame(b"second")
    for i in range(len(good)):
        bad = bytearray(good)
        bad[i] ^= 0x40
        with pytest.raises(RecordError):
            list(iter_records(bytes(bad)))


def test_truncated_tail_strict_and_lenient() -> None:
    data = frame(b"one") + frame(b"two")
    for cut in range(len(frame(b"one")) + 1, len(data)):
        with pytest.raises(TruncatedRecord):
            list(iter_records(data[:cut]))
        assert [r.data for r in iter_records(data[:cut], strict=False)] == [b"one"]


def test_offsets() -> None:
    data = frame(b"a") + frame(b"bb")
    assert [r.offset for r in iter_records(data)] == [0, len(frame(b"a"))]
