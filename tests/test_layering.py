"""Imports go one way (docs/DESIGN.md, Layout; mxsidecar/ARCHITECTURE.md): checked in fresh interpreters."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def loaded_after(stmt: str) -> set[str]:
    code = f"import sys; {stmt}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    return set(out.stdout.split())


def _heavy(module: str) -> bool:
    """PIL, mxnet or protobuf.  Not a bare ``google``: protobuf 3.x installs a
    ``-nspkg.pth`` that puts the empty ``google`` namespace in every interpreter."""
    return (
        module.split(".")[0] in ("PIL", "mxnet") or module == "google.protobuf" or module.startswith("google.protobuf.")
    )


def test_sidecar_never_loads_mxnet() -> None:
    mods = loaded_after("import mxsidecar.sidecar")
    assert "mxsidecar.sidecar" in mods
    assert not {m for m in mods if m == "mxnet" or m.startswith("mxnet.")}


def test_writer_loads_neither_pil_nor_encoders_nor_mxnet() -> None:
    mods = loaded_after("from mxsidecar import SidecarWriter")
    assert "mxsidecar.training.writer" in mods
    bad = {m for m in mods if _heavy(m) or m.startswith(("mxsidecar.sidecar", "mxsidecar.formats"))}
    assert not bad, bad


def test_messages_imports_nothing_heavy() -> None:
    # Loaded as a lone file: the package's __init__ imports the writer (and numpy).
    import mxsidecar.wire.descriptors as m

    code = (
        "import importlib.util as u; "
        f"s = u.spec_from_file_location('m', {m.__file__!r}); "
        "mod = u.module_from_spec(s); sys.modules['m'] = mod; s.loader.exec_module(mod)"
    )
    mods = loaded_after(code)
    assert "m" in mods
    assert not {m for m in mods if _heavy(m) or m.split(".")[0] == "numpy"}


def test_the_sidecar_process_loads_nothing_of_the_training_side() -> None:
    # What `python -m mxsidecar.sidecar` imports: the package, its process module, the
    # loop and the scalar encoder it always needs.
    mods = loaded_after("import mxsidecar.sidecar.process")
    assert "mxsidecar.sidecar.loop" in mods
    assert not {m for m in mods if m.startswith(("mxsidecar.training", "mxsidecar.integrations", "mxnet"))}


# -- every module, statically: which package may import which -------------------------

PACKAGE = Path(__file__).resolve().parents[1] / "mxsidecar"


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module, at module level?) for every import in ``path``."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts[:-1]  # a module's package; an __init__'s is its own directory, also parts[:-1]
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    # imports nested in `if TYPE_CHECKING:` at module level count as not loaded
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [f"{mod}.{a.name}" for a in node.names] if not node.module or node.level else [mod]
            out += [(n, id(node) in top) for n in names]
    return out


def _modules(sub: str) -> list[Path]:
    return sorted(p for p in (PACKAGE / sub).rglob("*.py") if not p.name.endswith("_pb2.py"))


@pytest.mark.parametrize(
    "side,forbidden",
    [
        ("wire", ("mxsidecar.training", "mxsidecar.sidecar", "mxsidecar.formats", "numpy", "google", "mxnet", "PIL")),
        ("sidecar", ("mxsidecar.training", "mxsidecar.integrations", "mxnet")),
        ("formats", ("mxsidecar.training", "mxsidecar.sidecar", "mxnet")),
        ("training", ("mxsidecar.sidecar", "PIL")),
        ("inspect", ("mxsidecar.training", "mxsidecar.sidecar", "mxnet")),
    ],
)
def test_imports_go_one_way(side: str, forbidden: tuple[str, ...]) -> None:
    bad = [
        (str(path.relative_to(PACKAGE)), mod)
        for path in _modules(side)
        for mod, _ in _imports(path)
        if mod == "mxsidecar" or mod.startswith(tuple(f + "." for f in forbidden) + forbidden)
    ]
    assert not bad, bad


def test_training_side_loads_protobuf_and_mxnet_only_when_needed() -> None:
    # Module level: no protobuf messages, no mxnet (capture imports it on the first NDArray).
    bad = [
        (str(path.relative_to(PACKAGE)), mod)
        for path in _modules("training")
        for mod, top in _imports(path)
        if top and mod.startswith(("mxsidecar.formats", "google", "mxnet"))
    ]
    assert not bad, bad
