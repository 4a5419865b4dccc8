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


def test_known_vector() -> None:
    # CRC32C("123456789") is the standard check value 0xE3069283.
    crc = 0xE3069283
    assert masked_crc32c(b"123456789") == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


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
