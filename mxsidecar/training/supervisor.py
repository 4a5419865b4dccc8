"""Starting or joining a sidecar, watching it, leaving it; its death as one error.

::

    training process                                       sidecar process
    ----------------                                       ---------------
    Supervisor(options)
      connect(node address of logdir) -- ok --> Hello ---> accept: Welcome(pid)   (join)
      refused: bind(node address), socketpair(), Hello,
        Popen([python, -m, mxsidecar.sidecar, --fd=N,
               --listen-fd=L, ...], pass_fds=[N, L]) -----> main()               (start)
    completion thread --- descriptors ----------------------->  recv / encode / write
    receiver thread   <-- Progress / Notice / StatsReply -----  after every batch
                      <-- Opened(path) -----------------------  a new event file
                      <-- Goodbye(last) ----------------------  after our CLOSE
                      <-- ErrorReport (traceback) ------------  on an exception, then exit 1
                      <-- EOF --------------------------------  on exit, crash or SIGKILL
        EOF -> (last: wait for the exit) -> SidecarError (sticky) or None, waiters woken

One sidecar per node and log directory: how a writer joins it or starts it is
``launch.py``; a writer of a URL logdir, or one made with ``share_sidecar=False``,
starts a sidecar of its own with no address.

Death is detected by channel EOF, which the kernel delivers the moment the process
is gone, whatever killed it: no polling, no sleeps.  The receiver then learns how it
ended (reaping it when it is our child) and hands one :class:`SidecarError` to the
pipeline, chained to the sidecar's own traceback when it sent one (as
``concurrent.futures.process`` chains ``_RemoteTraceback``).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import RemoteTraceback, SidecarError
from ..wire.descriptors import ErrorReport, Notice, Opened, Progress, StatsReply, decode_reply
from ..wire.framing import ChannelClosed
from ..wire.handshake import GOODBYE, WELCOME, Goodbye
from . import launch
from .launch import SidecarOptions

__all__ = ["Supervisor", "reap"]

REAP_TIMEOUT = 10.0  # after EOF the process is exiting; this bounds a stuck exit


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
    """The trainer's end of one sidecar connection, and the sidecar process if we started it.

    Callbacks run on the receiver thread: ``on_progress(done_seq)``,
    ``on_notice(Notice)``, ``on_stats(seq, dict)``, ``on_opened(path)`` and, exactly
    once when the connection ends, ``on_exit(error_or_None)`` (None: it ended cleanly
    after our CLOSE).
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
        self._goodbye: Goodbye | None = None
        self.proc: subprocess.Popen[bytes] | None  # the sidecar, if we started it
        conn = launch.connect(options)
        self.channel = conn.channel
        self.proc = conn.proc
        self._pid = conn.pid
        self.shared = conn.shared  # other writers may use this sidecar
        self._pending = conn.pending
        self._receiver = threading.Thread(target=self._receive, name="mxsidecar-receiver", daemon=True)
        self._receiver.start()

    @property
    def pid(self) -> int:
        return self._pid

    def send(self, payloads: list[bytes]) -> None:
        """Raises ChannelClosed if the sidecar is gone (the receiver reports why)."""
        self.channel.send(payloads)

    def _receive(self) -> None:
        remote_tb: str | None = None
        try:
            frames, self._pending = self._pending, []  # what came with the Welcome, first
            while True:
                for frame in frames:
                    if frame[0] == GOODBYE:
                        self._goodbye = Goodbye.unpack(frame)
                        continue
                    if frame[0] == WELCOME:  # the one a sidecar we started sends us
                        continue
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
                frames = self.channel.recv()
        except ChannelClosed:
            pass
        except BaseException as exc:  # a bug on our side of the channel: still one error
            remote_tb = f"receiver thread failed: {exc!r}"
            # Nobody reads the sidecar's replies now: EOF makes it write what it has
            # received and exit, rather than block on a full socket.
            self.shutdown_send()
        self._on_exit(self._explain(remote_tb))

    def _explain(self, remote_tb: str | None) -> SidecarError | None:
        goodbye = self._goodbye
        if remote_tb is None and goodbye is not None and self.close_requested:
            if goodbye.last:
                # The sidecar is exiting after closing every file (and uploading): close()
                # returns once it is gone, as with a sidecar of our own.
                rc = reap(self.proc, REAP_TIMEOUT) if self.proc is not None else _wait_gone(self._pid, REAP_TIMEOUT)
                if rc == 0:
                    return None
            else:
                # It serves other writers on.  Ours to reap when it exits, not to wait for.
                if self.proc is not None:
                    threading.Thread(target=self.proc.wait, name="mxsidecar-reaper", daemon=True).start()
                return None
        pid = self._pid
        if self.shared or self.proc is None:
            # A node sidecar may still serve other writers (our own close() may have given
            # up on it): wait for its exit, never kill it.  Only our own child, once
            # reaped, tells how it ended; one another writer started is its starter's.
            gone = _wait_gone(pid, REAP_TIMEOUT) is not None
            if self.proc is None and remote_tb is None:
                state = "is gone" if gone else "is still running but closed our connection"
                return SidecarError(
                    f"the mxsidecar sidecar (pid {pid}) that this writer shared with others on this machine {state} "
                    "(another process started it and has its exit status)",
                    0,
                )
            if self.proc is not None and not gone:
                threading.Thread(target=self.proc.wait, name="mxsidecar-reaper", daemon=True).start()
                return SidecarError(
                    f"the mxsidecar sidecar (pid {pid}) that this writer shared with others on this machine "
                    "is still running but closed our connection",
                    0,
                )
            rc = None if self.proc is None else self.proc.wait()
        else:
            rc = reap(self.proc, REAP_TIMEOUT)
        if remote_tb is not None:
            last = next((ln.strip() for ln in reversed(remote_tb.splitlines()) if ln.strip()), "an error")
            if rc is None:  # not our child: no exit status to tell
                err = SidecarError(f"the mxsidecar sidecar (pid {pid}) shared on this machine failed with {last}", 1)
            else:
                err = SidecarError(f"the mxsidecar sidecar (pid {pid}) failed with {last} (exit status {rc})", rc)
            err.__cause__ = RemoteTraceback(remote_tb)
            return err
        assert rc is not None  # only our own child gets here: a joiner without a traceback returned above
        if rc < 0:
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
        if not (self.options.sched_idle and hasattr(os, "SCHED_IDLE")):
            return
        if self.proc is None or self.proc.returncode is not None:
            return  # not our child (its pid may be another process's by now), or gone
        # A shared sidecar goes back to SCHED_IDLE itself after our CLOSE if other
        # writers remain (loop.py, _idle_again).
        try:
            os.sched_setscheduler(self._pid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:  # EPERM (unprivileged), ESRCH (already gone)
            pass

    def wait(self, timeout: float | None) -> bool:
        """Wait for the receiver to have seen the sidecar go; True if it has."""
        self._receiver.join(timeout)
        return not self._receiver.is_alive()

    def kill(self) -> bool:
        """Last resort (a stuck sidecar at close): SIGKILL a private sidecar (the receiver
        reaps it) and return True; from a node sidecar, which may be busy with other
        writers' values, only disconnect (False).  Our values it has not written are lost
        either way, and counted."""
        if self.shared or self.proc is None:
            self.shutdown_send()
            try:
                self.channel.sock.shutdown(socket.SHUT_RD)  # wakes our receiver: EOF
            except OSError:
                pass
            return False
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        return True

    def shutdown_send(self) -> None:
        """Half-close: the sidecar sees EOF, writes what it received and exits."""
        try:
            self.channel.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def forget_in_child(self) -> None:
        """In a forked child: close our copy of the parent's connection, without the
        shutdown that would end it for the parent too."""
        try:
            self.channel.sock.close()
        except OSError:
            pass

    def close_channel(self) -> None:
        try:
            self.channel.close()
        except OSError:
            pass


def _wait_gone(pid: int, timeout: float) -> int | None:
    """Wait up to ``timeout`` seconds for a process that is not our child to exit: 0
    once it is gone (its exit status is its parent's), None if it still runs."""
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # already gone (ESRCH), or no pidfds here
            fd = -1
        if fd >= 0:
            try:
                return 0 if select.select([fd], [], [], timeout)[0] else None
            finally:
                os.close(fd)
    import psutil  # Python 3.8 has no pidfd_open: poll, a zombie counting as gone

    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return 0
        except psutil.NoSuchProcess:
            return 0
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)
