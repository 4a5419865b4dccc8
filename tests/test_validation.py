"""Bad input is refused in the caller, naming the argument, before anything is enqueued."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_multiplexer

from mxsidecar import SidecarWriter

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def sw(tmp_path_factory):
    w = SidecarWriter(str(tmp_path_factory.mktemp("v")))
    yield w
    w.close()


def logged(sw: SidecarWriter) -> int:
    return sw._pipe._seq


BAD_TAGS = [
    (None, TypeError),
    (3, TypeError),
    (b"loss", TypeError),
    ("", ValueError),
    ("   ", ValueError),
    ("a\nb", ValueError),
    ("nul\0", ValueError),
    ("\ud800", ValueError),
    ("x" * 5000, ValueError),
]


@pytest.mark.parametrize("tag,exc", BAD_TAGS)
def test_bad_tags(sw, tag, exc) -> None:
    before = logged(sw)
    with pytest.raises(exc, match="tag"):
        sw.add_scalar(tag, 1.0, 0)
    with pytest.raises(exc, match="tag"):
        sw.add_text(tag, "x", 0)
    assert logged(sw) == before


@pytest.mark.parametrize(
    "value,exc",
    [
        ("1.0", TypeError),
        (None, TypeError),
        (1j, TypeError),
        ([1.0], ValueError),  # a list is mxboard's (name, value) pair
        (np.zeros(3), ValueError),
        (10**400, ValueError),
    ],
)
def test_bad_scalar_values(sw, value, exc) -> None:
    before = logged(sw)
    with pytest.raises(exc, match="value"):
        sw.add_scalar("ok", value, 0)
    assert logged(sw) == before


@pytest.mark.parametrize(
    "step,exc",
    [(-1, ValueError), (1.0, TypeError), (1.5, TypeError), ("3", TypeError), (True, TypeError), (2**63, ValueError)],
)
def test_bad_steps(sw, step, exc) -> None:
    before = logged(sw)
    with pytest.raises(exc, match="global_step"):
        sw.add_scalar("ok", 1.0, step)
    with pytest.raises(exc, match="global_step"):
        sw.add_text("ok", "x", step)
    assert logged(sw) == before


@pytest.mark.parametrize("walltime,exc", [("now", TypeError), (float("nan"), ValueError), (-1.0, ValueError)])
def test_bad_walltime(sw, walltime, exc) -> None:
    with pytest.raises(exc, match="walltime"):
        sw.add_scalar("ok", 1.0, 0, walltime=walltime)


def test_bad_text(sw) -> None:
    with pytest.raises(TypeError, match="text"):
        sw.add_text("ok", 5, 0)
    with pytest.raises(ValueError, match="text"):
        sw.add_text("ok", "bad \ud800 surrogate", 0)


@pytest.mark.parametrize("main_tag", ["../escape", "/abs", "a//b", "a/./b", "a\\b", "C:x", ".."])
def test_scalar_group_names_cannot_escape_logdir(sw, main_tag) -> None:
    before = logged(sw)
    with pytest.raises(ValueError, match="main_tag"):
        sw.add_scalars(main_tag, {"a": 1.0})
    with pytest.raises(ValueError, match="tag_scalar_dict key"):
        sw.add_scalars("ok", {"fine": 1.0, main_tag: 2.0})
    assert logged(sw) == before  # not even the good key went out


def test_scalar_group_values_checked_before_any_enqueue(sw) -> None:
    before = logged(sw)
    with pytest.raises(TypeError, match=r"tag_scalar_dict\['b'\]"):
        sw.add_scalars("grp", {"a": 1.0, "b": "oops"})
    with pytest.raises(TypeError, match="tag_scalar_dict"):
        sw.add_scalars("grp", [("a", 1.0)])
    assert logged(sw) == before


def test_defaults_are_the_ones_the_readme_documents(tmp_path) -> None:
    """README's Tuning table, checked on a live writer rather than on the signature:
    what the pipeline, the arena and the sidecar's command line actually got."""
    import os
    import threading

    import psutil

    with SidecarWriter(str(tmp_path)) as w:
        pipe = w._pipe
        assert pipe.max_queue == 1024
        assert pipe.arena.size == 64 * 2**20  # slab_mb=64
        assert (pipe.flow.on_full, pipe.flow.block_timeout) == ("block", 60.0)
        assert (pipe.on_error, pipe.max_restarts) == ("raise", 3)
        stats = w.stats()
        argv = psutil.Process(stats["sidecar_pid"]).cmdline()

        def option(name: str) -> str | None:  # "--name value" or "--name=value"
            for i, arg in enumerate(argv):
                if arg == name:
                    return argv[i + 1]
                if arg.startswith(name + "="):
                    return arg[len(name) + 1 :]
            return None

        assert stats["sidecar"]["flush_secs"] == 120.0  # from the writer's Hello, in effect in the sidecar
        assert option("--cpus") is None  # cpu_affinity=None
        expected_nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
        policy = "idle" if hasattr(os, "SCHED_IDLE") else "normal"
        assert stats["sidecar"]["scheduling"] == f"{policy}, nice {expected_nice}"  # sched_idle=True, nice=10
        assert not [t for t in threading.enumerate() if t.name == "mxsidecar-stats"]  # stats_secs=None


def test_logdir_that_is_a_file(tmp_path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="logdir"):
        SidecarWriter(str(f))
    with pytest.raises(TypeError, match="logdir"):
        SidecarWriter(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs,exc,name",
    [
        ({"max_queue": 0}, ValueError, "max_queue"),
        ({"max_queue": 1.5}, TypeError, "max_queue"),
        ({"slab_mb": -1}, ValueError, "slab_mb"),
        ({"flush_secs": 0}, ValueError, "flush_secs"),
        ({"on_full": "wait"}, ValueError, "on_full"),
        ({"block_timeout": -1}, ValueError, "block_timeout"),
        ({"filename_suffix": "a/b"}, ValueError, "filename_suffix"),
        ({"purge_step": -3}, ValueError, "purge_step"),
        ({"nice": 40}, ValueError, "nice"),
        ({"cpu_affinity": "0"}, TypeError, "cpu_affinity"),
        ({"sched_idle": 1}, TypeError, "sched_idle"),
    ],
)
def test_bad_constructor_arguments(tmp_path, kwargs, exc, name) -> None:
    with pytest.raises(exc, match=name):
        SidecarWriter(str(tmp_path), **kwargs)


@pytest.mark.parametrize(
    "cpus,exc,match",
    [
        ([], ValueError, r"cpu_affinity=\[\] pins the sidecar to no CPU; pass None for no pinning"),
        ((), ValueError, "pass None for no pinning"),
        ((c for c in ()), ValueError, "pass None for no pinning"),
        (3, TypeError, "cpu_affinity"),
        ([0, True], TypeError, "cpu_affinity"),
        ([10_000], ValueError, r"cpu_affinity names CPUs \[10000\]"),
    ],
)
def test_cpu_affinity_that_pins_nowhere_is_refused(tmp_path, cpus, exc, match) -> None:
    """An empty list once meant "no pinning" (issue 15, defect 6); a CPU outside this
    process's set killed the sidecar at start-up, to surface at a later call."""
    with pytest.raises(exc, match=match):
        SidecarWriter(str(tmp_path / "run"), cpu_affinity=cpus)
    assert not (tmp_path / "run").exists()


def test_cpu_affinity_from_a_generator_pins(tmp_path) -> None:
    """The ids are read once: a generator is not emptied by the check before use."""
    import os

    cpu = min(os.sched_getaffinity(0))
    with SidecarWriter(str(tmp_path), cpu_affinity=(c for c in [cpu])) as w:
        assert w.stats()["sidecar"]["scheduling"].endswith(f"cpus {cpu}")


def test_logdir_with_a_tilde_is_the_home_directory(tmp_path, monkeypatch) -> None:
    """'~/x' is the user's home, as in a shell, not './~/x' (issue 15, defect 6)."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    with SidecarWriter("~/runs/a") as w:
        w.add_scalar("loss", 1.0, 0)
    assert w.logdir == str(home / "runs" / "a")
    assert list(cwd.iterdir()) == []
    mux = load_multiplexer(str(home / "runs" / "a"))
    assert [e.step for e in mux.Tensors(".", "loss")] == [0]
