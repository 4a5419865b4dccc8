"""``python -m mxsidecar inspect LOGDIR``: what a log directory holds, without TensorBoard.

``reading`` walks the directory and parses every record into the report of
``model``; ``reporting`` prints it (or ``--json``).  The rules are TensorBoard's
Python loader's; see ``reading``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import IO, Any

from .model import EXIT_DAMAGED, EXIT_OK, EXIT_USAGE, FileReport, Report, RunReport, TagStats
from .reading import CHUNK_SIZE, RecordParser, inspect_logdir, is_event_file, scan_file
from .reporting import Progress, format_report

__all__ = [
    "CHUNK_SIZE",
    "EXIT_DAMAGED",
    "EXIT_OK",
    "EXIT_USAGE",
    "FileReport",
    "Progress",
    "RecordParser",
    "Report",
    "RunReport",
    "TagStats",
    "add_parser",
    "format_report",
    "inspect_logdir",
    "is_event_file",
    "run",
    "scan_file",
]


# -- command line -----------------------------------------------------------------
def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``inspect`` on an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "inspect",
        help="summarize a logdir's runs, tags and record integrity, without TensorBoard",
        description=(
            "Summarize the event files under LOGDIR: per run, its files (record counts and integrity) "
            "and per tag the kind, count, step range, wall times and last scalar value. "
            "Exit status: 0 all files intact (a truncated tail is tolerated), 1 a file is damaged, "
            "2 usage error (no such directory, no event files)."
        ),
    )
    p.add_argument("logdir", metavar="LOGDIR", help="directory to walk for event files (names containing 'tfevents')")
    p.add_argument("--json", action="store_true", help="print a JSON report instead of tables")
    # --progress / --no-progress by hand: argparse.BooleanOptionalAction is 3.9+.
    p.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    logdir: str = args.logdir
    if not os.path.exists(logdir):
        err.write(f"inspect: no such directory: {logdir}\n")
        return EXIT_USAGE
    if not os.path.isdir(logdir):
        err.write(f"inspect: not a directory: {logdir}\n")
        return EXIT_USAGE
    show = args.progress if args.progress is not None else err.isatty()
    report = inspect_logdir(logdir, progress=Progress(err) if show else None)
    if not report.runs:
        err.write(f"inspect: no event files (names containing 'tfevents') under {logdir}\n")
        for w in report.warnings:
            err.write(f"inspect: warning: {w}\n")
        return EXIT_USAGE
    if args.json:
        out.write(json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n")
    else:
        out.write(format_report(report) + "\n")
    out.flush()
    return report.exit_status
