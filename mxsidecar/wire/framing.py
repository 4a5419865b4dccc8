"""Descriptor framing over a Unix socket pair; EOF means "the other side is gone".

Every frame is ``u32 length | payload``.  The sender batches: the completion thread
joins every frame it has ready into one ``sendall`` (one syscall for hundreds of
scalars), and the receiver splits whatever ``recv`` returned.  The framing itself is
sans-IO (:class:`FrameDecoder`, :func:`encode_frames`) so it is tested on bytes.

A stream socket, not ``multiprocessing.Pipe``: no pickling, and EOF on the peer's
death is immediate and reliable on every path (SIGKILL included), which is what the
supervisor and the sidecar's parent watch rely on.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable

__all__ = ["Channel", "ChannelClosed", "FrameDecoder", "encode_frames"]

_LEN = struct.Struct("<I")
MAX_FRAME = 1 << 31  # a descriptor never carries array data; 2 GiB of text is a bug


class ChannelClosed(EOFError):
    """The peer closed its end (or died)."""


def encode_frames(payloads: Iterable[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(p)) + p for p in payloads)


class FrameDecoder:
    """Accumulates stream bytes and returns the complete frames they hold."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        pos, end = 0, len(self._buf)
        while end - pos >= _LEN.size:
            (n,) = _LEN.unpack_from(self._buf, pos)
            if n >= MAX_FRAME:
                raise ValueError(f"frame of {n} bytes: stream is corrupt")
            if end - pos - _LEN.size < n:
                break
            start = pos + _LEN.size
            frames.append(bytes(self._buf[start : start + n]))
            pos = start + n
        del self._buf[:pos]
        return frames

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back (non-zero at EOF means a torn frame)."""
        return len(self._buf)


class Channel:
    """One end of the socket pair, with framing."""

    RECV_SIZE = 1 << 20

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._decoder = FrameDecoder()

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, payloads: Iterable[bytes]) -> None:
        """Send frames in one write; raises :class:`ChannelClosed` if the peer is gone."""
        data = encode_frames(payloads)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ChannelClosed(str(exc)) from exc

    def recv(self) -> list[bytes]:
        """Block until at least one byte arrives; return the complete frames so far.

        May return an empty list (a frame still incomplete).  Raises
        :class:`ChannelClosed` at EOF.
        """
        try:
            data = self.sock.recv(self.RECV_SIZE)
        except ConnectionResetError as exc:
            raise ChannelClosed(str(exc)) from exc
        if not data:
            raise ChannelClosed("peer closed the channel")
        return self._decoder.feed(data)

    def close(self) -> None:
        self.sock.close()
