"""What crosses the process boundary: small, immutable, named for its role.

Arrays never cross here: a descriptor names a span of the shared-memory arena
(offset, byte count, dtype code, shape) and the sidecar reads the bytes in place.
A Python-float scalar travels inside its descriptor, and text as UTF-8 bytes.

This module imports neither numpy, protobuf nor mxnet: both processes load it, and
the sidecar must never pull in the training side's heavy imports.

Wire layout of a trainer -> sidecar descriptor (little-endian), framed by
:mod:`mxsidecar.wire.framing`::

    u8 op | u8 kind | u8 dtype | u8 ndim | u64 seq | i64 step | f64 wall_time
    f64 number | u64 offset | u64 nbytes | i64 dims[ndim]
    u32 len(tag) | u32 len(run) | u32 len(text) | u32 len(options) | the four byte strings

A run of float scalars (ITEMs of kind SCALAR whose value travels in the descriptor,
with consecutive seqs) may instead travel as one SCALARS frame, ``u8 op`` followed by
one entry per value::

    u64 seq | i64 step | f64 wall_time | f64 number | u32 len(tag) | u32 len(run) | tag | run

It means exactly what the same ITEM descriptors in the same order mean
(:func:`unpack_frame` expands it into them); it exists because the scalar is the kind
logged by the million, and one frame of fixed-layout entries costs both sides a
fraction of a framed descriptor each: one ``struct`` pack or unpack per value, no
per-value frame, no Descriptor object on the sidecar's fast path.
Sidecar -> trainer replies start with their op byte and carry what their class says.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

__all__ = [
    "DTYPE_CODES",
    "DTYPE_NAMES",
    "Descriptor",
    "ErrorReport",
    "Kind",
    "Notice",
    "Op",
    "Opened",
    "Progress",
    "StatsReply",
    "decode_reply",
    "pack_descriptor",
    "pack_scalar_entry",
    "unpack_frame",
]


class Op(IntEnum):
    """What a frame asks for; the first byte of every frame."""

    # trainer -> sidecar
    ITEM = 1  # one summary value to encode and append
    FLUSH = 2  # flush every open event file, then acknowledge with Progress
    CLOSE = 3  # drain, fsync, exit
    STATS = 4  # reply with StatsReply
    SKIP = 5  # an item that failed in the trainer after its seq was taken (text says why)
    SCALARS = 6  # consecutive float-scalar ITEMs in one frame (module docstring)
    # sidecar -> trainer
    PROGRESS = 10  # every descriptor up to done_seq is handled, its span free again
    ERROR = 11  # the sidecar is about to exit because of this traceback
    NOTICE = 12  # an item was refused, or written with values left out (NaN in a histogram)
    STATS_REPLY = 13
    OPENED = 14  # an event file was created (the trainer keeps the list for export_scalars)


class Kind(IntEnum):
    """The summary kind of an ITEM; the sidecar picks its encoder by it."""

    SCALAR = 1
    TEXT = 2
    HISTOGRAM = 3
    IMAGE = 4
    AUDIO = 5
    EMBEDDING = 6
    PR_CURVE = 7
    GRAPH = 8
    HPARAMS = 9
    CUSTOM_SCALARS = 10
    VIDEO = 11
    SESSION_START = 12  # purge_step: SessionLog START at a step


# dtype name <-> one byte.  Names are numpy's, so the sidecar can np.dtype(name).
DTYPE_NAMES: dict[int, str] = {
    0: "",
    1: "float16",
    2: "float32",
    3: "float64",
    4: "uint8",
    5: "int8",
    6: "int16",
    7: "int32",
    8: "int64",
    9: "bool",
    10: "uint16",
    11: "uint32",
    12: "uint64",
}
DTYPE_CODES: dict[str, int] = {name: code for code, name in DTYPE_NAMES.items()}

_HEAD = struct.Struct("<BBBBQqddQQ")
_LENS = struct.Struct("<IIII")


class Descriptor(NamedTuple):
    """One trainer -> sidecar message: a summary item or a control request.

    ``seq`` orders everything a writer sends; the sidecar handles descriptors in
    ``seq`` order and reports the highest one done, which frees every span up to it.
    A NamedTuple, not a frozen dataclass: the sidecar builds one per value, and a
    frozen dataclass's ``__init__`` costs several microseconds more.
    """

    op: Op
    seq: int
    kind: int = 0
    tag: str = ""
    step: int = 0
    wall_time: float = 0.0
    run: str = ""  # sub-directory of the logdir ('' is the writer's own run)
    number: float = 0.0  # a scalar's value
    text: str = ""
    offset: int = 0  # arena span of an array value
    nbytes: int = 0
    dtype: str = ""
    shape: tuple[int, ...] = ()
    options: dict[str, Any] | None = None

    def pack(self) -> bytes:
        return pack_descriptor(
            self.op, self.seq, self.kind, self.tag, self.step, self.wall_time, self.run,
            self.number, self.text, self.offset, self.nbytes, self.dtype, self.shape, self.options,
        )  # fmt: skip

    @classmethod
    def unpack(cls, buf: bytes) -> Descriptor:
        op, kind, dtype, ndim, seq, step, wall_time, number, offset, nbytes = _HEAD.unpack_from(buf)
        pos = _HEAD.size
        shape = struct.unpack_from(f"<{ndim}q", buf, pos)
        pos += ndim * 8
        lens = _LENS.unpack_from(buf, pos)
        pos += _LENS.size
        parts = []
        for n in lens:
            parts.append(buf[pos : pos + n])
            pos += n
        if pos != len(buf):
            raise ValueError(f"descriptor of {len(buf)} bytes has {len(buf) - pos} trailing bytes")
        tag, run, text, options = parts
        return cls(
            Op(op),
            seq,
            kind,
            tag.decode(),
            step,
            wall_time,
            run.decode(),
            number,
            text.decode(),
            offset,
            nbytes,
            DTYPE_NAMES[dtype],
            shape,
            json.loads(options) if options else None,
        )


def pack_descriptor(
    op: int,
    seq: int,
    kind: int = 0,
    tag: str = "",
    step: int = 0,
    wall_time: float = 0.0,
    run: str = "",
    number: float = 0.0,
    text: str = "",
    offset: int = 0,
    nbytes: int = 0,
    dtype: str = "",
    shape: tuple[int, ...] = (),
    options: dict[str, Any] | None = None,
) -> bytes:
    """The bytes of a :class:`Descriptor`, packed straight from its fields.

    The completion thread packs from plain tuples: building a frozen dataclass costs
    microseconds, which the training thread must not pay per scalar.
    """
    tag_b = tag.encode()
    run_b = run.encode()
    text_b = text.encode()
    opts = json.dumps(options, separators=(",", ":")).encode() if options else b""
    head = _HEAD.pack(op, kind, DTYPE_CODES[dtype], len(shape), seq, step, wall_time, number, offset, nbytes)
    dims = struct.pack(f"<{len(shape)}q", *shape) if shape else b""
    lens = _LENS.pack(len(tag_b), len(run_b), len(text_b), len(opts))
    return b"".join((head, dims, lens, tag_b, run_b, text_b, opts))


# One entry of a SCALARS frame, before its tag and run bytes.
SCALAR_ENTRY = struct.Struct("<QqddII")
SCALARS_OP = bytes([Op.SCALARS])  # the first byte of a SCALARS frame


def pack_scalar_entry(seq: int, step: int, wall_time: float, number: float, tag: str, run: str = "") -> bytes:
    """One value of a SCALARS frame (the frame is ``SCALARS_OP`` + its entries, joined)."""
    tag_b = tag.encode()
    run_b = run.encode()
    return SCALAR_ENTRY.pack(seq, step, wall_time, number, len(tag_b), len(run_b)) + tag_b + run_b


def unpack_frame(buf: bytes) -> list[Descriptor]:
    """The descriptors of one frame: a SCALARS frame holds several, any other one."""
    if buf[:1] != SCALARS_OP:
        return [Descriptor.unpack(buf)]
    out = []
    pos, end, size = 1, len(buf), SCALAR_ENTRY.size
    while pos < end:
        if end - pos < size:
            raise ValueError(f"SCALARS frame of {end} bytes ends inside an entry at byte {pos}")
        seq, step, wall_time, number, n_tag, n_run = SCALAR_ENTRY.unpack_from(buf, pos)
        pos += size
        if end - pos < n_tag + n_run:
            raise ValueError(f"SCALARS frame of {end} bytes ends inside the strings of entry {seq}")
        tag = buf[pos : pos + n_tag].decode()
        run = buf[pos + n_tag : pos + n_tag + n_run].decode()
        pos += n_tag + n_run
        out.append(Descriptor(Op.ITEM, seq, Kind.SCALAR, tag, step, wall_time, run, number))
    return out


_PROGRESS = struct.Struct("<BQ")


@dataclass(frozen=True)
class Progress:
    """Every descriptor with ``seq <= done_seq`` is handled and its span released."""

    done_seq: int

    def pack(self) -> bytes:
        return _PROGRESS.pack(Op.PROGRESS, self.done_seq)


@dataclass(frozen=True)
class ErrorReport:
    """The sidecar's last words: a formatted traceback, sent before it exits."""

    traceback: str

    def pack(self) -> bytes:
        return bytes([Op.ERROR]) + self.traceback.encode("utf-8", "replace")


@dataclass(frozen=True)
class Notice:
    """Something about one item that the sidecar alone could see (invariant 5):
    ``written=False``, the item was refused whole; ``written=True``, it was written
    with some values left out (``reason`` says which)."""

    seq: int
    kind: int
    tag: str
    reason: str
    written: bool = False

    def pack(self) -> bytes:
        body = {"seq": self.seq, "kind": self.kind, "tag": self.tag, "reason": self.reason, "written": self.written}
        return bytes([Op.NOTICE]) + json.dumps(body).encode()


@dataclass(frozen=True)
class StatsReply:
    """The sidecar's counters, answering the STATS descriptor ``seq``."""

    seq: int
    stats: dict[str, Any]

    def pack(self) -> bytes:
        return bytes([Op.STATS_REPLY]) + json.dumps({"seq": self.seq, "stats": self.stats}).encode()


@dataclass(frozen=True)
class Opened:
    """The sidecar created the event file ``path``.  Sent before anything written to
    it is reported done, so once a flush() returns the trainer knows every file that
    holds what was logged before it, whichever sidecar wrote it."""

    path: str

    def pack(self) -> bytes:
        # surrogateescape: a path is bytes to the kernel, and not all of them are UTF-8
        return bytes([Op.OPENED]) + self.path.encode("utf-8", "surrogateescape")


def decode_reply(buf: bytes) -> Progress | ErrorReport | Notice | StatsReply | Opened:
    """Parse one sidecar -> trainer frame."""
    op = buf[0]
    if op == Op.PROGRESS:
        return Progress(_PROGRESS.unpack(buf)[1])
    if op == Op.OPENED:
        return Opened(buf[1:].decode("utf-8", "surrogateescape"))
    if op == Op.ERROR:
        return ErrorReport(buf[1:].decode("utf-8", "replace"))
    if op == Op.NOTICE:
        d = json.loads(buf[1:])
        return Notice(d["seq"], d["kind"], d["tag"], d["reason"], d["written"])
    if op == Op.STATS_REPLY:
        d = json.loads(buf[1:])
        return StatsReply(d["seq"], d["stats"])
    raise ValueError(f"unknown reply op {op}")
