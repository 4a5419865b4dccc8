"""How a producer joins a sidecar, and how it leaves: the first and last frames of a
connection, and the node-wide address of a log directory's sidecar.

One sidecar serves every producer on a machine that logs to the same log directory
(local ranks, DataLoader workers, separate scripts).  It listens on a Linux abstract
Unix socket whose name is derived from the directory, so it needs no file to clean up
and vanishes with the process: nothing to leak, nothing stale to connect to::

    producer                                 sidecar
    Hello(pid, arena, prefix, ...)  ------>  attaches the arena, adds the producer
                                    <------  Welcome(sidecar pid) | Welcome(error=...)
    descriptors ... CLOSE           ------>  per-producer seq, spans, Progress
                                    <------  Progress(close seq), Goodbye(last)

``Goodbye.last`` says whether that producer was the last one: the sidecar then closes
every file, uploads (a URL logdir) and exits, and the producer waits for that exit,
as a single writer's ``close()`` always did.  A connection that ends without CLOSE is
a producer that died (or one that never finished its handshake): what it sent is
written, and its segment is unlinked once its process is gone.

Frames are JSON: a handful per connection, never on the hot path.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass

__all__ = ["GOODBYE", "HELLO", "WELCOME", "Goodbye", "Hello", "Welcome", "node_address"]

# First byte of each frame; distinct from every Op in descriptors.py.
HELLO = 20
WELCOME = 21
GOODBYE = 22
PROTOCOL = 1  # a sidecar of another mxsidecar version refuses a Hello it cannot serve


def node_address(logdir: str) -> str:
    """The abstract socket name of ``logdir``'s node sidecar (a leading NUL: Linux's
    abstract namespace).  Per user: another user's sidecar could not map our segments
    (created 0600) nor should it write into our files."""
    digest = hashlib.sha1(os.path.realpath(logdir).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return f"\0mxsidecar/{os.getuid()}/{PROTOCOL}/{digest}"


@dataclass(frozen=True)
class Hello:
    """A producer introduces itself: who it is (``pid`` and its start time, so its
    death can be told from a reused pid), its arena, and where its runs go
    (``prefix``: ``rank_<k>`` under ``ranks='all'``, else '')."""

    pid: int
    ctime: float
    arena: str
    prefix: str = ""
    suffix: str = ""
    file_index: int = 0
    flush_secs: float = 120.0
    protocol: int = PROTOCOL

    def pack(self) -> bytes:
        return bytes([HELLO]) + json.dumps(asdict(self)).encode("utf-8", "surrogateescape")

    @classmethod
    def unpack(cls, buf: bytes) -> Hello:
        if not buf or buf[0] != HELLO:
            raise ValueError(f"expected a Hello frame, got {buf[:1]!r}")
        return cls(**json.loads(buf[1:].decode("utf-8", "surrogateescape")))


@dataclass(frozen=True)
class Welcome:
    """The sidecar's answer: its pid, or why it cannot serve this producer (then the
    producer starts a sidecar of its own)."""

    pid: int
    error: str = ""

    def pack(self) -> bytes:
        return bytes([WELCOME]) + json.dumps(asdict(self)).encode()

    @classmethod
    def unpack(cls, buf: bytes) -> Welcome:
        if not buf or buf[0] != WELCOME:
            raise ValueError(f"expected a Welcome frame, got {buf[:1]!r}")
        return cls(**json.loads(buf[1:]))


@dataclass(frozen=True)
class Goodbye:
    """After a producer's CLOSE: its files are fsynced; ``last``: the sidecar is exiting."""

    last: bool

    def pack(self) -> bytes:
        return bytes([GOODBYE, int(self.last)])

    @classmethod
    def unpack(cls, buf: bytes) -> Goodbye:
        return cls(bool(buf[1]))
