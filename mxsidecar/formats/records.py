"""TFRecord framing and masked CRC32C, sans-IO.

Byte formats stay free of I/O (like TensorBoard's ``record_writer.py``): :func:`frame`
turns a serialized ``Event`` into the bytes of one record, and :func:`iter_records`
walks a buffer record by record, checking both checksums.  Files are opened in
:mod:`mxsidecar.sidecar.output.event_file`, nowhere else.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c as _crc32c

__all__ = [
    "Record",
    "RecordError",
    "TruncatedRecord",
    "frame",
    "iter_records",
    "masked_crc32c",
    "whole_records_length",
]

_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
HEADER_SIZE = _LENGTH.size + _CRC.size  # 12
FOOTER_SIZE = _CRC.size  # 4


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32C of ``data``, rotated and offset as TFRecord requires.

    The mask exists because a CRC computed over bytes that themselves embed CRCs
    is weak; TensorFlow rotates right by 15 and adds a constant.
    """
    crc = int(_crc32c.crc32c(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# For framing loops elsewhere (the sidecar's scalar fast path inlines frame()).
crc32c = _crc32c.crc32c
CRC = _CRC
MASK_DELTA = _MASK_DELTA
# Record headers by data length: a length's header and its checksum never change, and
# the events of one kind (a scalar with a given tag, say) come in few lengths.
HEADERS: dict[int, bytes] = {}  # filled by record_header


def record_header(n: int) -> bytes:
    """The 12 bytes before a record's data of length ``n``: length and its checksum."""
    header = HEADERS.get(n)
    if header is None:
        length = _LENGTH.pack(n)
        header = length + _CRC.pack(masked_crc32c(length))
        if len(HEADERS) < 4096:  # bounded: events of every size still frame, uncached
            HEADERS[n] = header
    return header


def frame(data: bytes) -> bytes:
    """Return one TFRecord holding ``data``.

    Format of a single record (all integers little-endian)::

        uint64    length
        uint32    masked crc32c of length
        byte      data[length]
        uint32    masked crc32c of data

    The sidecar frames every event it writes, so this is on the scalar's hot path:
    :func:`masked_crc32c` is inlined and the header comes from a cache.
    """
    header = HEADERS.get(len(data)) or record_header(len(data))
    crc = crc32c(data)
    return header + data + _CRC.pack((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)


def whole_records_length(buf: bytes | bytearray | memoryview) -> int:
    """How many leading bytes of ``buf`` are whole records (lengths only, no checksums:
    for bytes we framed ourselves, e.g. to cut a file back after a partial write)."""
    pos, end = 0, len(buf)
    while end - pos >= HEADER_SIZE:
        (length,) = _LENGTH.unpack_from(buf, pos)
        if pos + HEADER_SIZE + length + FOOTER_SIZE > end:
            break
        pos += HEADER_SIZE + length + FOOTER_SIZE
    return pos


class RecordError(ValueError):
    """A record whose length or data checksum does not match: the file is damaged."""

    def __init__(self, offset: int, what: str) -> None:
        super().__init__(f"record at byte {offset}: {what}")
        self.offset = offset


class TruncatedRecord(RecordError):
    """The buffer ends inside a record.

    TensorBoard's reader treats this as "not written yet" and retries later, so a
    truncated *last* record is not corruption; anything after it would be.
    """


@dataclass(frozen=True)
class Record:
    offset: int  # where the record starts in the buffer
    data: bytes


def iter_records(buf: bytes | bytearray | memoryview, *, strict: bool = True) -> Iterator[Record]:
    """Yield every record of ``buf`` in order, verifying both CRCs of each.

    With ``strict`` a truncated tail raises :class:`TruncatedRecord`; without it the
    tail is ignored, the way TensorBoard's loader treats a file still being written.
    A checksum mismatch always raises :class:`RecordError`.
    """
    view = memoryview(buf)
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < HEADER_SIZE:
            if strict:
                raise TruncatedRecord(pos, f"{end - pos} bytes left, header needs {HEADER_SIZE}")
            return
        header = view[pos : pos + _LENGTH.size]
        (length,) = _LENGTH.unpack(header)
        (length_crc,) = _CRC.unpack_from(view, pos + _LENGTH.size)
        if masked_crc32c(header) != length_crc:
            raise RecordError(pos, "length checksum mismatch")
        data_start = pos + HEADER_SIZE
        data_end = data_start + length
        if data_end + FOOTER_SIZE > end:
            if strict:
                raise TruncatedRecord(pos, f"record of {length} bytes cut off at end of buffer")
            return
        data = bytes(view[data_start:data_end])
        (data_crc,) = _CRC.unpack_from(view, data_end)
        if masked_crc32c(data) != data_crc:
            raise RecordError(pos, "data checksum mismatch")
        yield Record(pos, data)
        pos = data_end + FOOTER_SIZE
