"""Starting, watching and stopping the sidecar; turning its death into one error.

::

    training process                                       sidecar process
    ----------------                                       ---------------
    Supervisor.start()
      socketpair(); Popen([python, -m, mxsidecar.sidecar,
                           --fd=N, ...], pass_fds=[N]) ------> main()
    completion thread --- descriptors ----------------------->  recv / encode / write
    receiver thread   <-- Progress / Notice / StatsReply -----  after every batch
                      <-- Opened(path) -----------------------  a new event file
                      <-- ErrorReport (traceback) ------------  on an exception, then exit 1
                      <-- EOF --------------------------------  on exit, crash or SIGKILL
        EOF -> proc.wait() -> SidecarError (sticky), every waiter woken

Death is detected by channel EOF, which the kernel delivers the moment the process
is gone, whatever killed it: no polling, no sleeps.  The receiver then reaps the
process to learn how it ended, and hands one :class:`SidecarError` to the pipeline,
chained to the sidecar's own traceback when it sent one (as
``concurrent.futures.process`` chains ``_RemoteTraceback``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..errors import RemoteTraceback, SidecarError
from ..wire.descriptors import ErrorReport, Notice, Opened, Progress, StatsReply, decode_reply
from ..wire.framing import Channel, ChannelClosed
from .remote import RemoteLogdir

__all__ = ["SidecarOptions", "Supervisor", "reap"]

MALLOC_MMAP_THRESHOLD = 8 << 20  # bytes: larger blocks still come from (and go back to) mmap
MALLOC_TRIM_THRESHOLD = 64 << 20  # bytes of free heap kept for the next item's temporaries
REAP_TIMEOUT = 10.0  # after EOF the process is exiting; this bounds a stuck exit


class SidecarOptions:
    """What the sidecar is started with (its command line)."""

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
    ) -> None:
        self.logdir = logdir
        self.arena_name = arena_name
        self.flush_secs = flush_secs
        self.suffix = suffix
        self.file_index = file_index
        self.nice = nice
        self.cpus = cpus
        self.sched_idle = sched_idle
        self.remote = remote  # a URL logdir: ``logdir`` is then its local spool

    def argv(self, fd: int) -> list[str]:
        import psutil

        ctime = psutil.Process().create_time()  # lets the sidecar tell us from a reused pid
        # Every value is joined to its option as one word, and text (the logdir, the
        # suffix, the arena's name) travels as a JSON string: as a word of its own, a value
        # starting with '-' is taken by argparse for an option (``--suffix -v2`` exits 2,
        # ``--suffix --help`` prints the usage and exits 0), and even joined, argparse
        # drops a value of exactly '--' (``--suffix=--`` parses as []).  A JSON string
        # starts with '"', which argparse leaves alone; json round-trips any str,
        # surrogate-escaped path bytes included.
        argv = [
            sys.executable, "-m", "mxsidecar.sidecar",
            f"--fd={fd}",
            "--arena=" + json.dumps(self.arena_name),
            "--logdir=" + json.dumps(self.logdir),
            f"--flush-secs={self.flush_secs!r}",
            "--suffix=" + json.dumps(self.suffix),
            f"--file-index={self.file_index}",
            f"--ppid={os.getpid()}",
            f"--parent-ctime={ctime!r}",
            f"--nice={self.nice}",
        ]  # fmt: skip
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


def reap(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Wait for ``proc`` to exit, SIGKILL it after ``timeout`` seconds; its exit status.

    ``Popen.wait(timeout)`` polls, sleeping up to 50 ms between looks (CPython < 3.14),
    so a sidecar that exits 1 ms after closing its files cost ``close()`` up to 50 ms
    more.  A pidfd (Linux >= 5.3, Python >= 3.9) becomes readable the moment the
    process exits: wait on it instead, as on the channel's EOF, and poll only where
    there is none.
    """
    pidfd = -1
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:  # ENOSYS (an old kernel, a seccomp profile), or already reaped
            pidfd = -1
    if pidfd >= 0:
        try:
            exited = bool(select.select([pidfd], [], [], timeout)[0])
        finally:
            os.close(pidfd)
        if not exited:
            proc.kill()
        return proc.wait()  # the process is gone (or killed): waitpid returns at once
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


class Supervisor:
    """Owns the sidecar process and the trainer's end of the channel.

    Callbacks run on the receiver thread: ``on_progress(done_seq)``,
    ``on_notice(Notice)``, ``on_stats(seq, dict)``, ``on_opened(path)`` and, exactly
    once when the sidecar is gone, ``on_exit(error_or_None)`` (None: it exited cleanly
    after CLOSE).
    """

    def __init__(
        self,
        options: SidecarOptions,
        on_progress: Callable[[int], None],
        on_notice: Callable[[Notice], None],
        on_stats: Callable[[int, dict[str, Any]], None],
        on_exit: Callable[[SidecarError | None], None],
        on_opened: Callable[[str], None],
    ) -> None:
        self.options = options
        self._on_progress = on_progress
        self._on_notice = on_notice
        self._on_stats = on_stats
        self._on_exit = on_exit
        self._on_opened = on_opened
        self.close_requested = False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
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
        try:
            # subprocess execs at once (no Python runs between fork and exec), so
            # MXNet's engine threads are never duplicated: invariant 3.
            self.proc = subprocess.Popen(
                options.argv(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.channel = Channel(ours)
        self._receiver = threading.Thread(target=self._receive, name="mxsidecar-receiver", daemon=True)
        self._receiver.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, payloads: list[bytes]) -> None:
        """Raises ChannelClosed if the sidecar is gone (the receiver reports why)."""
        self.channel.send(payloads)

    def _receive(self) -> None:
        remote_tb: str | None = None
        try:
            while True:
                for frame in self.channel.recv():
                    reply = decode_reply(frame)
                    if isinstance(reply, Progress):
                        self._on_progress(reply.done_seq)
                    elif isinstance(reply, Notice):
                        self._on_notice(reply)
                    elif isinstance(reply, StatsReply):
                        self._on_stats(reply.seq, reply.stats)
                    elif isinstance(reply, Opened):
                        self._on_opened(reply.path)
                    elif isinstance(reply, ErrorReport):
                        remote_tb = reply.traceback
        except ChannelClosed:
            pass
        except BaseException as exc:  # a bug on our side of the channel: still one error
            remote_tb = f"receiver thread failed: {exc!r}"
            # Nobody reads the sidecar's replies now: EOF makes it write what it has
            # received and exit, rather than block on a full socket.
            self.shutdown_send()
        self._on_exit(self._explain(remote_tb))

    def _explain(self, remote_tb: str | None) -> SidecarError | None:
        rc = reap(self.proc, REAP_TIMEOUT)
        if remote_tb is None and rc == 0 and self.close_requested:
            return None
        pid = self.proc.pid
        if remote_tb is not None:
            last = next((ln.strip() for ln in reversed(remote_tb.splitlines()) if ln.strip()), "an error")
            err = SidecarError(f"the mxsidecar sidecar (pid {pid}) failed with {last} (exit status {rc})", rc)
            err.__cause__ = RemoteTraceback(remote_tb)
        elif rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
            hint = " (the OOM killer sends SIGKILL)" if -rc == signal.SIGKILL else ""
            err = SidecarError(f"the mxsidecar sidecar (pid {pid}) was killed by {name}{hint}", rc)
        else:
            err = SidecarError(
                f"the mxsidecar sidecar (pid {pid}) exited with status {rc} before close() "
                "(its stderr, above, may say why)",
                rc,
            )
        return err

    def request_close(self) -> None:
        self.close_requested = True
        self._hurry()

    def _hurry(self) -> None:
        """At close(), lift SCHED_IDLE (the niceness stays) where the system permits it.

        SCHED_IDLE exists so that training wins every contention; once the trainer waits
        in close() there is no training left to yield to, but any other runnable thread
        on the machine (a data loader, another job) still starves the sidecar, and
        close() waits for it: measured, an idle writer's close() went from ~3 ms to
        15-30 ms on a loaded 2-core box.  Leaving SCHED_IDLE needs CAP_SYS_NICE or room
        in RLIMIT_NICE (root in a container has it); elsewhere this is EPERM and close()
        keeps its old pace.  The process is our unreaped child: its pid is still its own.
        """
        if not (self.options.sched_idle and hasattr(os, "SCHED_IDLE")) or self.proc.returncode is not None:
            return
        try:
            os.sched_setscheduler(self.proc.pid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:  # EPERM (unprivileged), ESRCH (already gone)
            pass

    def wait(self, timeout: float | None) -> bool:
        """Wait for the receiver to have seen the sidecar go; True if it has."""
        self._receiver.join(timeout)
        return not self._receiver.is_alive()

    def kill(self) -> None:
        """Last resort (a stuck sidecar at close): SIGKILL; the receiver reaps it."""
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    def shutdown_send(self) -> None:
        """Half-close: the sidecar sees EOF, writes what it received and exits."""
        try:
            self.channel.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close_channel(self) -> None:
        try:
            self.channel.close()
        except OSError:
            pass
