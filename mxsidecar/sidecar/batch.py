"""The scalar fast path: a SCALARS frame straight to event-file records.

A SCALARS frame (``wire/descriptors.py``) holds consecutive float scalars, fixed-layout
entries.  Handled one descriptor at a time, a scalar costs the sidecar more than ten
microseconds of Python: a ``Descriptor`` built, enums looked up, a dispatch, a record
framed and appended, each for one value.  Here one loop reads every entry with
``struct.unpack_from``, builds its ``Event`` bytes from cached per-tag parts
(``encoders/scalar.py``; byte-identical to protobuf's serialization, tests check it
against TensorBoard's classes), frames it (``formats/records.py``) and appends the run's
records to the event file in one piece.

What the loop does after it is what it does after any descriptor: the records are
buffered in the file, written through before any Progress covers them (a sidecar that
dies before that has reported none of them, and the trainer counts them lost).
Failure injection (``faults``) sees each value at ``receive`` and ``encode``, as it
sees a descriptor.
"""

from __future__ import annotations

from collections.abc import Callable

from ..formats import records
from ..wire.descriptors import SCALAR_ENTRY
from . import faults
from .encoders.scalar import WALL_TIME_FIELD, event_bytes, float32_bytes, step_field, summary_prefix
from .output.event_file import EventFile

__all__ = ["write_scalars"]

_TAGS: dict[bytes, str] = {}  # tag bytes -> str, for the per-file metadata set


def write_scalars(
    frame: bytes,
    file_for: Callable[[str], EventFile],
    last_steps: dict[str, dict[str, int]],
    went_back: Callable[[EventFile, str, int, int, int], None],
) -> tuple[int, int, int]:
    """Append the event of every scalar in a SCALARS ``frame`` to its run's file
    (``file_for(run)``, in the order of the entries); return (values, last seq, bytes).

    ``last_steps`` (event file path -> tag -> last step, shared with the descriptor
    path: ``runs.py``) is kept up to date; ``went_back(file, tag, step, last, seq)`` is
    called for a value whose step is below its tag's last one in that file.

    Raises ValueError for a frame that ends inside an entry (after appending the
    entries before it, like the descriptors before a bad one)."""
    unpack = SCALAR_ENTRY.unpack_from
    size = SCALAR_ENTRY.size
    wall_field = WALL_TIME_FIELD.pack
    headers, header, crc32c, pack_crc = records.HEADERS, records.record_header, records.crc32c, records.CRC.pack
    mask = records.MASK_DELTA
    pos, end = 1, len(frame)
    count = seq = nbytes = 0
    f: EventFile | None = None  # the first entry always opens one: its run differs from None
    run: str | None = None
    # tag bytes -> summary prefix, for tags whose metadata this file already has: the
    # one lookup most values need.  Rebuilt when the run (the file) changes.
    known: dict[bytes, bytes] = {}
    out: list[bytes] = []
    last_tag_b = b""  # of the last value appended
    steps: dict[str, int] = {}  # the current file's tag -> last step (from last_steps)
    room: float = 0.0  # bytes the file takes before it rolls over (remote.py), and taken so far
    taken = 0
    while end - pos >= size:
        seq, step, wall_time, number, n_tag, n_run = unpack(frame, pos)
        pos += size
        tag_b = frame[pos : pos + n_tag]
        pos += n_tag
        entry_run = frame[pos : pos + n_run].decode() if n_run else ""
        pos += n_run
        if pos > end:
            break
        if entry_run != run:
            if out:
                _append(f, out, last_tag_b)
                out = []
            f = file_for(entry_run)
            run = entry_run
            known = {}
            room, taken = f.room, 0
            steps = last_steps.setdefault(f.path, {})
        tag = _TAGS.get(tag_b) or _tag(tag_b)
        if faults.active:  # the points a descriptor passes, for each value
            faults.hit("receive", tag)
            faults.hit("encode", tag)
        if room < 0:
            assert f is not None
            room = f.room
        last = steps.get(tag)
        steps[tag] = step
        if last is not None and step < last:
            assert f is not None
            went_back(f, tag, step, last, seq)
        pre = known.get(tag_b)
        if pre is not None:
            event = (
                (wall_field(9, wall_time) if wall_time != 0.0 else b"")
                + (step_field(step) if step else b"")
                + pre
                + float32_bytes(number)
            )
        else:
            assert f is not None
            first = tag not in f.tags_with_metadata
            if first:
                f.tags_with_metadata.add(tag)  # TensorBoard keeps only a tag's first metadata
            else:
                known[tag_b] = summary_prefix(tag_b)
            event = event_bytes(wall_time, step, tag, number, first)
        # records.frame, inlined: its call costs as much as the framing
        crc = crc32c(event)
        masked = (((crc >> 15) | (crc << 17)) + mask) & 0xFFFFFFFF
        record = (headers.get(len(event)) or header(len(event))) + event + pack_crc(masked)
        out.append(record)
        count += 1
        nbytes += len(record)
        last_tag_b = tag_b
        taken += len(record)
        if taken >= room:  # the file rolls over here (a URL logdir): the next one starts
            _append(f, out, last_tag_b)  # with no tag's metadata, as append() would see it
            out = []
            known = {}
            room, taken = -1.0, 0  # asked at the next value: no file opens for none
    if out:
        _append(f, out, last_tag_b)
    if pos != end:
        raise ValueError(f"SCALARS frame of {end} bytes ends inside an entry at byte {pos}")
    return count, seq, nbytes


def _append(f: EventFile | None, out: list[bytes], tag_b: bytes) -> None:
    assert f is not None
    f.last_tag = _TAGS.get(tag_b) or _tag(tag_b)  # what failure injection at "write" matches
    f.append_records(b"".join(out), len(out))


def _tag(tag_b: bytes) -> str:
    tag = tag_b.decode()
    if len(_TAGS) < 100_000:  # bounded: a run logging endless new tags still works
        _TAGS[tag_b] = tag
    return tag
