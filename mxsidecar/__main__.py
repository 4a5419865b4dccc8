"""``python -m mxsidecar COMMAND``: command-line tools: ``inspect``, ``upload``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import __version__
from . import inspect as inspect_cmd
from .sidecar import upload as upload_cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mxsidecar",
        description="mxsidecar's command-line tools.",
    )
    parser.add_argument("--version", action="version", version=f"mxsidecar {__version__}")
    sub = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND", required=True)
    inspect_cmd.add_parser(sub)
    upload_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return 130
    except BrokenPipeError:
        # the reader of our output went away (`| head`): not an error of ours; point
        # stdout at /dev/null so the interpreter's final flush does not complain
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
