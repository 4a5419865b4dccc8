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
import socket
import struct
from dataclasses import asdict, dataclass

__all__ = ["GOODBYE", "HELLO", "WELCOME", "Goodbye", "Hello", "Welcome"]
__all__ += ["check_prefix", "node_address", "peer_credentials"]

# First byte of each frame; distinct from every Op in descriptors.py.
HELLO = 20
WELCOME = 21
GOODBYE = 22
PROTOCOL = 1  # a sidecar of another mxsidecar version refuses a Hello it cannot serve


def node_address(logdir: str) -> str:
    """The abstract socket name of ``logdir``'s node sidecar (a leading NUL: Linux's
    abstract namespace, which belongs to the network namespace).

    Writers meet only if they would write the same directory into the same shared
    memory and can see each other's processes: the name covers the directory's path,
    device and inode (two containers may mount different directories at one path), the
    user (another user's sidecar could not map our 0600 segments, nor should it write
    our files), and the mount, IPC and pid namespaces (a sidecar tells a producer's
    death by its pid).  The name is not a permission: both ends also check the peer's
    uid with SO_PEERCRED.
    """
    real = os.path.realpath(logdir)
    parts = [real, str(os.getuid())]
    try:
        st = os.stat(real)
        parts += [str(st.st_dev), str(st.st_ino)]
    except OSError:
        pass
    for ns in ("mnt", "ipc", "pid"):
        try:
            parts.append(f"{ns}:{os.stat(f'/proc/self/ns/{ns}').st_ino}")
        except OSError:  # no procfs, or not Linux: the path alone
            pass
    digest = hashlib.sha1("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return f"\0mxsidecar/{os.getuid()}/{PROTOCOL}/{digest}"


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket, as the kernel saw it
    connect (SO_PEERCRED), in this process's pid namespace."""
    cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", cred)
    return pid, uid


def check_prefix(prefix: str) -> None:
    """A producer's runs stay inside the sidecar's logdir: ValueError otherwise."""
    parts = prefix.split("/")
    if prefix.startswith("/") or "\0" in prefix or ".." in parts:
        raise ValueError(f"run prefix {prefix!r} would leave the log directory")


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
