"""Joining the node's sidecar for a logdir, or starting one.

::

    connect(options)
      share: connect(node address of logdir) -- ok --> Hello --> Welcome(pid)     (join)
             refused: bind(node address)       -- ok --> start, with the listener  (start)
                      bind failed (EADDRINUSE): another writer just bound it; connect again
      else (share_sidecar=False, a URL logdir): start, without a listener

Binding is the lock: of two writers starting at once, one binds and starts the sidecar,
the other's bind fails and it connects.  The writer that starts a sidecar hands it the
socket pair end of its own connection, with its Hello already in it, and the bound
listener; it closes its copy of the listener at once, so the name lives exactly as long
as the sidecar (which closes it first thing when its last producer leaves).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import warnings
from typing import NamedTuple

from ..wire.framing import Channel, ChannelClosed
from ..wire.handshake import Hello, Welcome, node_address, peer_credentials
from .remote import RemoteLogdir

__all__ = ["Connection", "SidecarOptions", "connect"]

MALLOC_MMAP_THRESHOLD = 8 << 20  # bytes: larger blocks still come from (and go back to) mmap
MALLOC_TRIM_THRESHOLD = 64 << 20  # bytes of free heap kept for the next item's temporaries
# A node sidecar answers a Hello between two items (loop.py), even when busy at SCHED_IDLE.
JOIN_TIMEOUT = 30.0
JOIN_RETRY_SECS = 5.0  # connect/bind races with other writers and with a sidecar that is leaving
JOIN_BACKOFF_SECS = 0.01


class SidecarOptions:
    """What the sidecar is started with (its command line) and what we tell it (Hello)."""

    def __init__(
        self,
        logdir: str,
        arena_name: str,
        flush_secs: float,
        suffix: str = "",
        file_index: int = 0,
        nice: int = 10,
        cpus: tuple[int, ...] = (),
        sched_idle: bool = True,
        remote: RemoteLogdir | None = None,
        prefix: str = "",
        share: bool = False,
    ) -> None:
        self.logdir = logdir  # the sidecar's directory; our runs are under ``prefix``
        self.arena_name = arena_name
        self.flush_secs = flush_secs
        self.suffix = suffix
        self.file_index = file_index
        self.nice = nice
        self.cpus = cpus
        self.sched_idle = sched_idle
        self.remote = remote  # a URL logdir: ``logdir`` is then its local spool
        self.prefix = prefix
        self.share = share and remote is None  # a URL logdir's sidecar uploads its own spool

    def hello(self) -> Hello:
        import psutil

        ctime = psutil.Process().create_time()  # lets the sidecar tell us from a reused pid
        return Hello(os.getpid(), ctime, self.arena_name, self.prefix, self.suffix, self.file_index, self.flush_secs)

    def argv(self, fd: int, listen_fd: int = -1) -> list[str]:
        # Every value is joined to its option as one word, and text (the logdir, the
        # remote URL) travels as a JSON string: as a word of its own, a value
        # starting with '-' is taken by argparse for an option (``--logdir -v2`` exits 2,
        # ``--logdir --help`` prints the usage and exits 0), and even joined, argparse
        # drops a value of exactly '--' (``--logdir=--`` parses as []).  A JSON string
        # starts with '"', which argparse leaves alone; json round-trips any str,
        # surrogate-escaped path bytes included.
        argv = [
            sys.executable, "-m", "mxsidecar.sidecar",
            f"--fd={fd}",
            "--logdir=" + json.dumps(self.logdir),
            f"--nice={self.nice}",
        ]  # fmt: skip
        if listen_fd >= 0:
            argv.append(f"--listen-fd={listen_fd}")
        if self.cpus:
            argv.append("--cpus=" + ",".join(map(str, self.cpus)))
        if self.sched_idle:
            argv.append("--sched-idle")
        if self.remote is not None:
            argv.append("--remote=" + json.dumps(self.remote.url))
            argv.append("--storage-options=" + json.dumps(self.remote.storage_options))
        return argv


def _package_root() -> str:
    """The directory holding the mxsidecar package (mxsidecar/training/supervisor.py)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Connection(NamedTuple):
    """A writer's connection to its sidecar."""

    channel: Channel
    proc: subprocess.Popen[bytes] | None  # the sidecar, if we started it
    pid: int
    pending: list[bytes]  # frames that came with the Welcome (an Opened, say): the receiver's first
    shared: bool  # other writers may use this sidecar


def connect(options: SidecarOptions) -> Connection:
    """Our connection to a sidecar: the node's (joined or started), or one of our own."""
    hello = options.hello()
    if options.share:
        joined = _join(options, hello)
        if joined is not None:
            return joined
    channel, proc = _start(options, hello)
    return Connection(channel, proc, proc.pid, [], False)


def _join(options: SidecarOptions, hello: Hello) -> Connection | None:
    """Join the node sidecar of our logdir, or start it; None: start a private one.

    Connecting and binding race with other writers doing the same and with a sidecar
    that is leaving (it closes the address first): try again, briefly backing off,
    until JOIN_RETRY_SECS; a writer left without the node's sidecar after that, or
    one the sidecar cannot serve, gets a sidecar of its own, and a warning saying so.
    """
    address = node_address(options.logdir)
    deadline = time.monotonic() + JOIN_RETRY_SECS
    why = "the node's sidecar kept leaving while this writer joined it"
    while time.monotonic() < deadline:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)
        except (ConnectionRefusedError, FileNotFoundError):
            sock.close()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                listener.bind(address)
            except OSError:  # EADDRINUSE: another writer bound it just now; join it
                listener.close()
                time.sleep(JOIN_BACKOFF_SECS)
                continue
            try:
                listener.listen(64)
                channel, proc = _start(options, hello, listener)
                return Connection(channel, proc, proc.pid, [], True)
            finally:
                listener.close()  # the sidecar holds its own copy; ours must not keep the name alive
        try:
            if peer_credentials(sock)[1] != os.getuid():
                # Someone else's process holds our address (abstract sockets have no
                # permissions): never hand it our data or our segment's name.
                why = f"the address of {options.logdir}'s sidecar is held by another user's process"
                sock.close()
                break
            welcome, channel, pending = _handshake(sock, hello)
        except (ChannelClosed, OSError):
            # The sidecar was leaving (its last producer closed just then): it closed
            # the address and our connection with it.  Start or join the next one.
            sock.close()
            time.sleep(JOIN_BACKOFF_SECS)
            continue
        except socket.timeout:
            sock.close()
            why = f"the node's sidecar did not answer within {JOIN_TIMEOUT:g}s"
            break
        if welcome.error:
            sock.close()
            why = f"the node's sidecar cannot serve this writer: {welcome.error}"
            break
        return Connection(channel, None, welcome.pid, pending, True)
    warnings.warn(
        f"mxsidecar: {options.logdir}: {why}; this writer starts a sidecar (and an event file) of its own",
        RuntimeWarning,
        stacklevel=5,
    )
    return None


def _handshake(sock: socket.socket, hello: Hello) -> tuple[Welcome, Channel, list[bytes]]:
    """Send our Hello, read the Welcome; the channel (its decoder holds what came after)."""
    channel = Channel(sock)
    sock.settimeout(JOIN_TIMEOUT)
    try:
        channel.send([hello.pack()])
        frames: list[bytes] = []
        while not frames:
            frames = channel.recv()
    finally:
        if sock.fileno() >= 0:
            sock.settimeout(None)
    # The sidecar may send more right after the Welcome (the Opened of our run's file):
    # those frames are the receiver thread's first, and the same channel (its decoder)
    # goes on from there.
    return Welcome.unpack(frames[0]), channel, frames[1:]


def _start(
    options: SidecarOptions, hello: Hello, listener: socket.socket | None = None
) -> tuple[Channel, subprocess.Popen[bytes]]:
    """Start a sidecar; ``listener``: the bound node address it will serve.

    Every sidecar stays in its starter's session and process group.  Not a session of
    its own, though a node sidecar serves writers of other groups: with the kernel's
    autogroups (sched_autogroup_enabled, the default on desktop and many server
    kernels) a new session is a scheduling group of its own, which CFS gives a share
    equal to the whole training process's, SCHED_IDLE or not (measured with
    ``perf/bench_steptime.py --profiles heavy``, 4 interleaved runs each: +16 % median
    step time with the sidecar in a session of its own, +6.6 % in its starter's).  A
    signal to the starter's group is handled by the sidecar instead (``process.py``).
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    channel = Channel(ours)
    try:
        # Buffered in the socket until the sidecar reads it: its first frame.
        channel.send([hello.pack()])
    except BaseException:
        ours.close()
        theirs.close()
        raise
    env = dict(os.environ)
    # The child must import this very copy of mxsidecar, even from a source tree
    # that is not installed (sys.path of a `-m` child starts at its cwd).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
    # The sidecar is one thread by design (invariant 9: training wins the CPU).  numpy's
    # BLAS would otherwise start a thread per core for a histogram's sum of squares and
    # spin them between calls: measured, half the sidecar's CPU in the heavy profile.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    # The encoders make numpy temporaries of 0.25-4 MB, item after item.  glibc's
    # defaults serve those from mmap or trim them back to the kernel on free, so each
    # one is page-faulted in afresh: measured, half of a histogram's time.  Keep them
    # on the heap and keep up to MALLOC_TRIM_THRESHOLD_ of free heap (setting one of
    # the two alone turns off glibc's adaptive threshold and is worse than neither).
    # A user's own setting wins; other C libraries ignore these names.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(MALLOC_MMAP_THRESHOLD))
    env.setdefault("MALLOC_TRIM_THRESHOLD_", str(MALLOC_TRIM_THRESHOLD))
    fds = (theirs.fileno(),) if listener is None else (theirs.fileno(), listener.fileno())
    argv = options.argv(theirs.fileno(), -1 if listener is None else listener.fileno())
    try:
        # subprocess execs at once (no Python runs between fork and exec), so
        # MXNet's engine threads are never duplicated: invariant 3.
        proc = subprocess.Popen(argv, pass_fds=fds, stdin=subprocess.DEVNULL, env=env, close_fds=True)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return channel, proc
