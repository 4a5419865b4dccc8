"""Imports go one way (DESIGN.md, Layout): checked in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys

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
    mods = loaded_after("import mxsidecar")
    assert "mxsidecar.writer" in mods
    bad = {m for m in mods if _heavy(m) or m.startswith("mxsidecar.encoders") or m.startswith("mxsidecar.proto")}
    assert not bad, bad


def test_messages_imports_nothing_heavy() -> None:
    # Loaded as a lone file: the package's __init__ imports the writer (and numpy).
    import mxsidecar.messages as m

    code = (
        "import importlib.util as u; "
        f"s = u.spec_from_file_location('m', {m.__file__!r}); "
        "mod = u.module_from_spec(s); sys.modules['m'] = mod; s.loader.exec_module(mod)"
    )
    mods = loaded_after(code)
    assert "m" in mods
    assert not {m for m in mods if _heavy(m) or m.split(".")[0] == "numpy"}
