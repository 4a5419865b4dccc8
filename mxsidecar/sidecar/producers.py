"""The producers a sidecar serves: one per connection, each with its own arena,
sequence numbers, progress and counters.

A producer is a writer in some training process: the one that started this sidecar
(its connection inherited as ``--fd``) or one that joined through the node address
(``wire/handshake.py``).  Nothing of one producer's state is shared with another but
the event files of the runs they both write, so one producer's crash, its order of
items and its ``stats()`` are its own.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from typing import Any

from ..wire.arena import Arena
from ..wire.descriptors import Progress
from ..wire.framing import Channel, ChannelClosed
from ..wire.handshake import Hello, Welcome, check_prefix, peer_credentials

__all__ = ["Producer", "accept_producer", "read_hello"]

HELLO_TIMEOUT = 5.0  # a producer sends its Hello right after connecting


class Producer:
    """One connection's state; the loop owns it from Hello to CLOSE or EOF."""

    def __init__(self, channel: Channel, hello: Hello, arena: Arena) -> None:
        self.channel = channel
        self.arena = arena
        self.pid = hello.pid
        self.ctime = hello.ctime
        self.prefix = hello.prefix  # this producer's runs live under it ('rank_3', or '')
        self.suffix = hello.suffix
        self.file_index = hello.file_index
        self.flush_secs = hello.flush_secs
        self.done_seq = 0
        self.reported_seq = 0
        self.opened: list[str] = []  # event files this producer was told of (Opened), in order
        self.files: dict[str, Any] = {}  # its run -> EventFile: the hot path's one lookup
        self.written: Counter[str] = Counter()  # kind name -> values written
        self.rejected: Counter[str] = Counter()  # tag -> items refused
        self.nonfinite: Counter[str] = Counter()  # tag -> NaN/Inf values left out of histograms
        self.busy: dict[str, float] = {}  # kind name -> seconds spent encoding and writing it
        self.bytes_written = 0  # of its own event records
        self.pending: list[bytes] = []  # frames that arrived with the Hello, not yet handled

    def fileno(self) -> int:
        return self.channel.fileno()

    def run_path(self, run: str) -> str:
        """A descriptor's run (relative to the producer's logdir) within the sidecar's logdir."""
        if not self.prefix:
            return run
        return f"{self.prefix}/{run}" if run else self.prefix

    def send(self, payload: bytes) -> None:
        try:
            self.channel.send([payload])
        except (ChannelClosed, OSError):
            pass  # the producer is gone; EOF on its next recv tells the loop

    def report(self) -> None:
        if self.done_seq != self.reported_seq:
            self.reported_seq = self.done_seq
            self.send(Progress(self.done_seq).pack())

    def alive(self) -> bool:
        """Whether the producer's process still exists (the same one: pid and start time).

        A zombie counts as gone: a SIGKILLed producer whose parent has not reaped it yet.
        """
        import psutil

        try:
            proc = psutil.Process(self.pid)
            return bool(proc.create_time() == self.ctime) and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def gone_within(self, seconds: float) -> bool:
        """Whether the producer is gone now or goes within ``seconds`` (after a SIGTERM,
        which may be killing it too).  Polls: nothing reports a process's death to a
        process that is not its parent and has stopped reading its channel."""
        deadline = time.monotonic() + seconds
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def stats(self) -> dict[str, Any]:
        """This producer's own counters (``stats()`` stays per writer on a shared sidecar)."""
        return {
            "done_seq": self.done_seq,
            "written": dict(self.written),
            "rejected": dict(self.rejected),
            "nonfinite": dict(self.nonfinite),
            "busy_seconds": {k: round(v, 6) for k, v in self.busy.items()},
            "files": list(self.opened),
        }

    def close(self) -> None:
        """Drop the connection and the mapping (the loop unlinks the name: at CLOSE, or once
        the producer's process is gone)."""
        try:
            self.channel.close()
        except OSError:
            pass
        self.arena.close()


def read_hello(channel: Channel) -> tuple[Hello, list[bytes]]:
    """The first frame of a connection (blocking, bounded by HELLO_TIMEOUT), and the
    frames that came with it: the producer that started us does not wait for our
    Welcome, so its first descriptors may already be there."""
    sock = channel.sock
    sock.settimeout(HELLO_TIMEOUT)
    try:
        frames: list[bytes] = []
        while not frames:
            frames = channel.recv()
    finally:
        sock.settimeout(None)
    return Hello.unpack(frames[0]), frames[1:]


def accept_producer(channel: Channel, welcome_pid: int) -> Producer | None:
    """Handshake on a new connection: read Hello, attach the arena, answer Welcome.

    Returns None if the peer went away or sent nothing useful, or if its arena cannot
    be mapped here (another IPC namespace, say): then the Welcome carries the reason,
    and the producer starts a sidecar of its own.
    """
    try:
        # The kernel's word, not the Hello's: an abstract socket has no permissions, so
        # any local process can connect.  Only our own user's, which could write our
        # files and map our segments anyway, is served.
        pid, uid = peer_credentials(channel.sock)
        if uid != os.getuid():
            channel.close()
            return None
        hello, pending = read_hello(channel)
    except (ChannelClosed, OSError, ValueError, TypeError, socket.timeout):
        channel.close()
        return None
    try:
        if hello.pid != pid:
            raise ValueError(f"the Hello says pid {hello.pid}, the kernel {pid} (another pid namespace?)")
        check_prefix(hello.prefix)
        arena = Arena.attach(hello.arena)
    except (OSError, ValueError) as exc:
        try:
            channel.send([Welcome(welcome_pid, error=f"cannot serve it: {exc}").pack()])
        except (ChannelClosed, OSError):
            pass
        channel.close()
        return None
    producer = Producer(channel, hello, arena)
    producer.pending = pending
    producer.send(Welcome(welcome_pid).pack())
    return producer
