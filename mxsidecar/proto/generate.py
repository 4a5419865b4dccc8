"""Regenerate the ``*_pb2.py`` / ``*_pb2.pyi`` modules from the ``.proto`` files here.

Usage (paths are resolved from this file, so any working directory works)::

    pip install grpcio-tools==1.74.0   # bundles protoc 31.1
    python mxsidecar/proto/generate.py

Use a separate virtualenv for grpcio-tools: it pins its own protobuf, which
need not be the runtime this project is tested against. Run it by path:
``python -m mxsidecar.proto.generate`` also works, but only where mxsidecar's
own dependencies (numpy, ...) are installed, because ``-m`` imports the
``mxsidecar`` package first.

The protoc version is pinned on purpose. Generated code carries the version
of the protoc that produced it and refuses to import under an *older*
protobuf runtime. The oldest runtime we support is protobuf 6.31.1, so the
code must come from protoc 31.x, which emits gencode 6.31.x. A newer protoc
would silently raise that floor for every user.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REQUIRED_PROTOC_MAJOR = "31"

PROTO_DIR = Path(__file__).resolve().parent
# Generated imports are "mxsidecar.proto.xxx_pb2", so the include root has to
# be the directory that contains the mxsidecar package.
REPO_ROOT = PROTO_DIR.parent.parent


def _protoc(*args: str) -> subprocess.CompletedProcess[str]:
    # "-m grpc_tools.protoc" (not protoc.main()) because only the module entry
    # point adds the include path for google/protobuf/*.proto, and because
    # protoc prints --version from C, beyond Python's stdout redirection.
    return subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def _check_protoc_version() -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        sys.exit(
            "grpc_tools is not installed in this interpreter.\n"
            "Run: pip install grpcio-tools==1.74.0 (ideally in a separate venv)."
        )
    result = _protoc("--version")
    version = result.stdout.strip()  # e.g. "libprotoc 31.1"
    major = version.split()[-1].split(".")[0] if version else ""
    if result.returncode != 0 or major != REQUIRED_PROTOC_MAJOR:
        sys.exit(
            f"Refusing to generate: found {version or 'no protoc'!r}, need libprotoc "
            f"{REQUIRED_PROTOC_MAJOR}.x.\n"
            "Generated modules refuse to import under a protobuf runtime older "
            "than the protoc that made them, and we support protobuf >= 6.31.1, "
            "so gencode must come from protoc 31.x.\n"
            "Run: pip install grpcio-tools==1.74.0 (bundles libprotoc 31.1)."
        )


def _remove_stale_outputs(protos: list[Path]) -> None:
    # A module whose .proto was deleted would otherwise keep importing and
    # registering its messages.
    stems = {p.stem for p in protos}
    for out in sorted(PROTO_DIR.glob("*_pb2.py*")):
        stem = out.name.split("_pb2.", 1)[0]
        if out.suffix in (".py", ".pyi") and stem not in stems:
            print(f"removing stale {out.relative_to(REPO_ROOT)}")
            out.unlink()


def main() -> None:
    _check_protoc_version()
    protos = sorted(PROTO_DIR.glob("*.proto"))
    if not protos:
        sys.exit(f"no .proto files found in {PROTO_DIR}")
    _remove_stale_outputs(protos)
    result = _protoc(
        f"-I{REPO_ROOT}",
        f"--python_out={REPO_ROOT}",
        f"--pyi_out={REPO_ROOT}",
        *(str(p.relative_to(REPO_ROOT)) for p in protos),
    )
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.returncode != 0:
        sys.exit(result.returncode)
    print(f"generated {len(protos)} modules in {PROTO_DIR.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
