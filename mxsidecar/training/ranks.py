"""Who am I: this process's rank among the trainers, and whether it writes.

Resolved once, in the writer's constructor, before any sidecar, shared memory or
directory exists, from the first source that has an answer::

    rank= / world_size=                 explicit arguments
    kvstore=                            an mx.kv store: kv.rank, kv.num_workers
    the launcher's environment          Horovod, Open MPI, torchrun-style, BytePS,
                                        then SLURM (see LAUNCHERS)
    nothing                             a single process (rank None): writes, as always

A ps-lite server or scheduler (``DMLC_ROLE`` of ``server`` or ``scheduler``) never
writes, whatever else is set: MXNet runs the user's script in those processes too.

Launchers that set several variable families must agree: ``horovodrun`` over
``mpirun`` sets both Horovod's and Open MPI's, and they name the same rank.  SLURM is
the exception: its variables stay set for every process of a job step even when
another launcher (``mpirun`` inside ``salloc``) starts the ranks, so SLURM is used
only when no other launcher is, and never compared with them.

Pure: the environment is passed in, so tests drive every launcher without processes.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, NamedTuple

__all__ = ["LAUNCHERS", "RANKS", "Placement", "resolve"]

RANKS = ("zero", "all")

# (name, rank variable, size variable, local rank variable); SLURM last on purpose.
LAUNCHERS: tuple[tuple[str, str, str, str], ...] = (
    ("Horovod", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("torchrun-style", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
)
SLURM = ("SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")


class Placement(NamedTuple):
    """Where this process stands, and what its writer does."""

    rank: int | None  # None: a single process, no launcher
    world_size: int | None
    source: str  # where rank and size came from, for messages and stats()
    writes: bool  # False: this writer costs nothing and writes nothing
    run: str  # sub-directory of the logdir this process writes ('' for the logdir itself)


def resolve(
    ranks: Any = "zero",
    rank: Any = None,
    world_size: Any = None,
    kvstore: Any = None,
    environ: Mapping[str, str] = os.environ,
) -> Placement:
    """The placement of this process; ValueError/TypeError naming the source of a bad value."""
    if ranks not in RANKS:
        raise ValueError(f"ranks must be 'zero' (only rank 0 writes) or 'all' (rank k writes rank_k), got {ranks!r}")
    role = environ.get("DMLC_ROLE", "worker")
    if role in ("server", "scheduler"):
        return Placement(None, None, f"DMLC_ROLE={role}", False, "")
    if rank is not None or world_size is not None:
        r, n, source = _explicit(rank, world_size)
    elif kvstore is not None:
        r, n, source = _from_kvstore(kvstore)
    else:
        found = _from_environment(environ)
        if found is None:
            return Placement(None, None, "single process", True, "")
        r, n, source = found
    if ranks == "zero":
        return Placement(r, n, source, r == 0, "")
    return Placement(r, n, source, True, f"rank_{r}")


def _check_pair(rank: Any, size: Any, rank_name: str, size_name: str) -> tuple[int, int | None]:
    for value, name in ((rank, rank_name), (size, size_name)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if rank is None:
        raise ValueError(f"{size_name}={size} is given but {rank_name} is not; give both, or neither")
    if size is not None and size < 1:
        raise ValueError(f"{size_name} must be >= 1, got {size}")
    if rank < 0 or (size is not None and rank >= size):
        bound = f"[0, {size})" if size is not None else ">= 0"
        raise ValueError(f"{rank_name} must be in {bound}, got {rank}")
    return rank, size


def _explicit(rank: Any, world_size: Any) -> tuple[int, int | None, str]:
    r, n = _check_pair(rank, world_size, "rank", "world_size")
    return r, n, "rank=/world_size= arguments"


def _from_kvstore(kv: Any) -> tuple[int, int | None, str]:
    if not (hasattr(kv, "rank") and hasattr(kv, "num_workers") and hasattr(kv, "type")):
        raise TypeError(
            f"kvstore must be an MXNet KVStore (mx.kv.create(...)), with rank and num_workers; got {type(kv).__name__}"
        )
    r, n = _check_pair(kv.rank, kv.num_workers, "kvstore.rank", "kvstore.num_workers")
    return r, n, f"kvstore ({kv.type})"


def _int_var(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def _family(environ: Mapping[str, str], names: tuple[str, str, str, str]) -> tuple[int, int | None, str] | None:
    label, rank_var, size_var, _local = names
    rank, size = _int_var(environ, rank_var), _int_var(environ, size_var)
    if rank is None and size is None:
        return None
    r, n = _check_pair(rank, size, rank_var, size_var)
    return r, n, f"{label} ({rank_var}={r}" + (f", {size_var}={n})" if n is not None else ")")


def _byteps(environ: Mapping[str, str]) -> tuple[int, int | None, str] | None:
    """BytePS: one process per GPU of each machine; the machine is DMLC_WORKER_ID."""
    local, local_size = _int_var(environ, "BYTEPS_LOCAL_RANK"), _int_var(environ, "BYTEPS_LOCAL_SIZE")
    if local is None:
        return None
    if local_size is None:
        raise ValueError("BYTEPS_LOCAL_RANK is set but BYTEPS_LOCAL_SIZE is not")
    _check_pair(local, local_size, "BYTEPS_LOCAL_RANK", "BYTEPS_LOCAL_SIZE")
    machine = _int_var(environ, "DMLC_WORKER_ID") or 0
    machines = _int_var(environ, "DMLC_NUM_WORKER") or 1
    _check_pair(machine, machines, "DMLC_WORKER_ID", "DMLC_NUM_WORKER")
    rank = machine * local_size + local
    return rank, machines * local_size, f"BytePS (DMLC_WORKER_ID={machine}, BYTEPS_LOCAL_RANK={local})"


def _from_environment(environ: Mapping[str, str]) -> tuple[int, int | None, str] | None:
    found = [f for f in (*(_family(environ, names) for names in LAUNCHERS), _byteps(environ)) if f is not None]
    if found:
        first = found[0]
        for other in found[1:]:
            sizes_agree = first[1] is None or other[1] is None or first[1] == other[1]
            if other[0] != first[0] or not sizes_agree:
                raise ValueError(f"the launcher's environment contradicts itself: {first[2]} but {other[2]}")
        return first
    return _family(environ, SLURM)
