"""Who writes in a distributed job (ranks=, rank=, world_size=, kvstore=, the launcher's
environment): resolved in the constructor, a non-writing rank costs nothing, and
ranks='all' gives each rank its own run, read back with TensorBoard's loader."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import pytest
from conftest import event_files, load_multiplexer, our_segments, sidecar_children

from mxsidecar import SidecarWriter
from mxsidecar.training.ranks import Placement, resolve

pytestmark = pytest.mark.timeout(120)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- resolution, pure -----------------------------------------------------------------


@pytest.mark.parametrize(
    "environ,rank,size",
    [
        ({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1"}, 3, 4),
        ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "8"}, 2, 8),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 1, 2),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"}, 5, 6),
        # BytePS: machine 1 of 2, GPU 2 of 4 on it
        ({"BYTEPS_LOCAL_RANK": "2", "BYTEPS_LOCAL_SIZE": "4", "DMLC_WORKER_ID": "1", "DMLC_NUM_WORKER": "2"}, 6, 8),
        # horovodrun over mpirun sets both families, agreeing
        ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 1, 2),
        # mpirun inside a SLURM allocation: SLURM's variables are the allocation's, not the rank's
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, 1, 2),
    ],
)
def test_each_launcher(environ, rank, size) -> None:
    zero = resolve("zero", environ=environ)
    assert (zero.rank, zero.world_size, zero.writes, zero.run) == (rank, size, rank == 0, "")
    every = resolve("all", environ=environ)
    assert (every.writes, every.run) == (True, f"rank_{rank}")


def test_nothing_set_is_a_single_process_that_writes() -> None:
    assert resolve("zero", environ={}) == Placement(None, None, "single process", True, "")
    assert resolve("all", environ={}).run == ""  # no ranks, no rank_<k> directory


@pytest.mark.parametrize("role", ["server", "scheduler"])
def test_ps_lite_servers_and_schedulers_never_write(role) -> None:
    for ranks in ("zero", "all"):
        p = resolve(ranks, environ={"DMLC_ROLE": role, "RANK": "0", "WORLD_SIZE": "2"})
        assert not p.writes and role in p.source


def test_precedence_arguments_then_kvstore_then_environment() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "2"}
    kv = types.SimpleNamespace(rank=0, num_workers=2, type="dist_sync")
    assert resolve("zero", rank=0, world_size=2, kvstore=kv, environ=env).source == "rank=/world_size= arguments"
    assert resolve("zero", kvstore=kv, environ=env).source == "kvstore (dist_sync)"
    assert resolve("zero", environ=env).source.startswith("torchrun-style")


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"ranks": "some"}, ValueError, "ranks must be 'zero'"),
        ({"rank": 2, "world_size": 2}, ValueError, r"rank must be in \[0, 2\), got 2"),
        ({"rank": -1}, ValueError, "rank must be in >= 0"),
        ({"world_size": 2}, ValueError, "world_size=2 is given but rank is not"),
        ({"rank": 0, "world_size": 0}, ValueError, "world_size must be >= 1"),
        ({"rank": "0"}, TypeError, "rank must be an int"),
        ({"rank": True}, TypeError, "rank must be an int"),
        ({"kvstore": object()}, TypeError, "kvstore must be an MXNet KVStore"),
        ({"kvstore": types.SimpleNamespace(rank=3, num_workers=2, type="dist")}, ValueError, "kvstore.rank"),
        ({"environ": {"RANK": "x", "WORLD_SIZE": "2"}}, ValueError, "RANK='x' is not an integer"),
        ({"environ": {"HOROVOD_RANK": "2", "HOROVOD_SIZE": "2"}}, ValueError, r"HOROVOD_RANK must be in \[0, 2\)"),
        ({"environ": {"WORLD_SIZE": "2"}}, ValueError, "WORLD_SIZE=2 is given but RANK is not"),
        (
            {"environ": {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "RANK": "1", "WORLD_SIZE": "2"}},
            ValueError,
            r"contradicts itself: Horovod \(HOROVOD_RANK=0.*but torchrun-style \(RANK=1",
        ),
        (
            {"environ": {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "0", "WORLD_SIZE": "4"}},
            ValueError,
            "contradicts itself",
        ),
        ({"environ": {"BYTEPS_LOCAL_RANK": "0"}}, ValueError, "BYTEPS_LOCAL_SIZE is not"),
    ],
)
def test_bad_placement_names_its_source(kwargs, error, match) -> None:
    ranks = kwargs.pop("ranks", "zero")
    environ = kwargs.pop("environ", {})
    with pytest.raises(error, match=match):
        resolve(ranks, environ=environ, **kwargs)


def test_a_real_local_kvstore() -> None:
    mx = pytest.importorskip("mxnet")
    p = resolve("all", kvstore=mx.kv.create("local"), environ={})
    assert (p.rank, p.world_size, p.run) == (0, 1, "rank_0")


# -- the writer ---------------------------------------------------------------------------


def test_a_rank_that_does_not_write_costs_nothing(tmp_path) -> None:
    logdir = tmp_path / "logs"
    before = set(our_segments())
    with SidecarWriter(str(logdir), rank=1, world_size=2) as w:
        assert not sidecar_children() and set(our_segments()) == before
        assert w.add_scalar("loss", 1.0, 0) is None
        w.add_histogram("h", [1.0, 2.0], 0)
        w.add_text("t", "x")
        w.flush()
        assert w.stats() == {"rank": 1, "world_size": 2, "rank_source": "rank=/world_size= arguments", "writes": False}
        w.export_scalars(str(tmp_path / "scalars.json"))
    w.close()
    assert not logdir.exists() and not (tmp_path / "scalars.json").exists()


def test_arguments_are_checked_on_every_rank(tmp_path) -> None:
    # A rank that does not write still refuses what would fail on rank 0.
    with pytest.raises(ValueError, match="max_queue"):
        SidecarWriter(str(tmp_path), max_queue=0, rank=1, world_size=2)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\)"):
        SidecarWriter(str(tmp_path), rank=5, world_size=2)
    assert not os.listdir(tmp_path)


def test_rank_zero_writes_as_a_single_process(tmp_path) -> None:
    with SidecarWriter(str(tmp_path), rank=0, world_size=2) as w:
        w.add_scalar("loss", 0.5, 1)
        s = w.stats()
        assert s["writes"] and s["rank"] == 0 and s["sidecar"]["written"] == {"scalar": 1}
    assert event_files(str(tmp_path)) and all(os.path.dirname(f) == str(tmp_path) for f in event_files(str(tmp_path)))


def test_ranks_all_gives_each_rank_its_run(tmp_path) -> None:
    for rank in (0, 1):
        with SidecarWriter(str(tmp_path), ranks="all", rank=rank, world_size=2) as w:
            for step in range(3):
                w.add_scalar("loss", float(rank * 10 + step), step)
            w.add_scalars("lr", {"a": 0.1}, 0)
    mux = load_multiplexer(str(tmp_path))
    assert {"rank_0", "rank_1", "rank_0/lr/a", "rank_1/lr/a"} <= set(mux.Runs())
    for rank in (0, 1):
        values = [e.tensor_proto.float_val[0] for e in mux.Tensors(f"rank_{rank}", "loss")]
        assert values == [rank * 10.0, rank * 10.0 + 1, rank * 10.0 + 2]


LAUNCHED = textwrap.dedent(
    """
    import sys
    from mxsidecar import SidecarWriter
    with SidecarWriter(sys.argv[1], ranks=sys.argv[2]) as w:
        for step in range(5):
            w.add_scalar("loss", float(step), step)
        print(w.stats()["writes"])
    """
)


@pytest.mark.parametrize("ranks", ["zero", "all"])
@pytest.mark.parametrize(
    "family",
    [("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("RANK", "WORLD_SIZE")],
)
def test_launchers_simulated_in_processes(tmp_path, ranks, family) -> None:
    """Two processes started as a launcher would start them (its variables set), running
    the same script: with 'zero' only rank 0 leaves files; with 'all' each its run."""
    procs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "DMLC_ROLE")}
        env.update({family[0]: str(rank), family[1]: "2", "PYTHONPATH": ROOT})
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", LAUNCHED, str(tmp_path), ranks], env=env, stdout=subprocess.PIPE, text=True
            )
        )
    outs = [p.communicate(timeout=90)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == (["True", "False"] if ranks == "zero" else ["True", "True"])
    runs = sorted(load_multiplexer(str(tmp_path)).Runs())
    assert runs == (["."] if ranks == "zero" else ["rank_0", "rank_1"])
