"""The sidecar as a process: its command line, its scheduling, its signals, its exit.

``python -m mxsidecar.sidecar --fd=N [--listen-fd=L] --logdir='"DIR"' ...`` (see
``training/supervisor.py``, which starts it) lowers its own priority first (invariant
9), takes the Hello of the producer that started it (its arena's name, its pid), and
runs :class:`~.loop.Sidecar` until the last producer has closed or died.  Its exit
says how it ended:

* 0: closed, or the producers died and everything received was written;
* 1: an exception, whose traceback went to the trainer first (an ``ErrorReport``);
* a signal: SIGTERM is turned into a clean exit (files closed, the arena left to its
  owner, unless the owner dies within ``TERM_GRACE_SECS``; a node sidecar instead stops
  taking new writers and exits when those it serves have gone: a SIGTERM to the whole
  process group kills a trainer that does not handle it, and nobody else would unlink
  its segment); SIGINT is ignored, because Ctrl-C reaches the whole process group and
  the trainer decides what happens.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import socket
import sys
import traceback

from ..wire.descriptors import ErrorReport
from ..wire.framing import Channel, ChannelClosed
from .loop import Sidecar
from .producers import accept_producer

__all__ = ["main"]


# timeout(1), Slurm's scancel and ``kill -TERM -PGID`` signal the trainer and the sidecar
# together; a trainer without a SIGTERM handler dies at once (reparenting us), one with a
# handler lives on and closes its writer itself.  A second is plenty to tell them apart.
TERM_GRACE_SECS = 1.0


class _Terminated(Exception):
    """Raised by the SIGTERM handler to leave the loop through the cleanup path."""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m mxsidecar.sidecar", description=__doc__.split("\n")[0])
    p.add_argument("--fd", type=int, required=True, help="inherited socket of the producer that starts us")
    p.add_argument("--listen-fd", type=int, default=-1, help="inherited listening socket: the node address")
    # The trainer's text arrives as JSON strings (training/supervisor.py says why).
    p.add_argument("--logdir", type=json.loads, required=True, help="a JSON string")
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--cpus", default="", help="comma-separated CPU ids to pin to")
    p.add_argument("--sched-idle", action="store_true", help="Linux SCHED_IDLE: run only when a CPU is idle")
    p.add_argument("--remote", type=json.loads, default=None, help="a URL logdir (JSON string); --logdir is its spool")
    p.add_argument("--storage-options", type=json.loads, default={}, help="fsspec options, a JSON object")
    return p.parse_args(argv)


def _lower_priority(nice: int, cpus: str, sched_idle: bool) -> str:
    """Invariant 9: training wins every CPU contention; we use the gaps.  Returns the
    scheduling actually in effect, for ``stats()``.

    Called first thing in ``main``, while this is the only thread: on Linux both the
    niceness and the policy belong to a thread, and threads started later inherit them.

    Why SCHED_IDLE beyond nice: a nice-10 sidecar still takes its ~10 % share, and an
    MXNet engine or OpenMP thread that wakes while it runs waits for the scheduler's
    wake-up granularity (milliseconds) before it preempts it; a training step is a chain
    of such short wake-ups.  Under SCHED_IDLE any normal thread that wakes preempts the
    sidecar at once (heavy profile: +7.5 % step time under SCHED_IDLE against +19.5 % at
    nice 10, ``python perf/bench_steptime.py --diagnose --repeats 3`` on 2 cores, in
    ``perf/README.md``).  The cost: while the
    trainer keeps every core busy the sidecar barely runs, its backlog grows, and
    ``on_full`` decides; a trainer that waits (``flush()``, a full queue, a data loader)
    lets it run at full speed.
    """
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    policy = "normal"
    if sched_idle and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            policy = "idle"
        except OSError:  # not permitted (a seccomp profile, say): nice alone applies
            pass
    if cpus:
        import psutil

        psutil.Process().cpu_affinity([int(c) for c in cpus.split(",")])
    return f"{policy}, nice {os.getpriority(os.PRIO_PROCESS, 0)}" + (f", cpus {cpus}" if cpus else "")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    faulthandler.enable()  # a segfault still leaves a traceback on stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    serving: list[Sidecar] = []  # the node sidecar, once there is one

    def _on_term(signum: int, frame: object) -> None:
        # A node sidecar serves writers of other process groups: a SIGTERM to its
        # starter's group (timeout, kill -TERM -PGID) must not end it for them.  It
        # stops taking new writers and goes on with the living; those the same signal
        # killed are seen gone by EOF, and it exits with the last (loop.py).
        if serving and serving[0].listener is not None:
            serving[0].term_requested = True
            return
        raise _Terminated()

    signal.signal(signal.SIGTERM, _on_term)
    channel = Channel(socket.socket(fileno=args.fd))
    listener = socket.socket(fileno=args.listen_fd) if args.listen_fd >= 0 else None
    if listener is not None:
        listener.setblocking(False)  # a connection reset before accept() must not block the loop
    sidecar: Sidecar | None = None
    try:
        scheduling = _lower_priority(args.nice, args.cpus, args.sched_idle)
        first = accept_producer(channel, os.getpid())
        if first is None:
            return 0  # the producer that started us went away before saying who it is
        sidecar = Sidecar(first, args, scheduling, listener)
        serving.append(sidecar)
        sidecar.run()
        return 0
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup short
        if sidecar is not None:
            sidecar.terminate(TERM_GRACE_SECS)
        return 0
    except BaseException:
        tb = traceback.format_exc()
        try:
            if sidecar is not None:
                sidecar.close_all()  # keep what was written up to the failure
        except BaseException:
            tb += "\nwhile closing event files:\n" + traceback.format_exc()
        if sidecar is not None:
            sidecar.fail(tb)
        else:
            try:
                channel.send([ErrorReport(tb).pack()])
            except (ChannelClosed, OSError):
                pass
        sys.stderr.write(tb)
        return 1
