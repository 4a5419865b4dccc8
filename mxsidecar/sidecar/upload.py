"""``python -m mxsidecar upload SPOOL``: upload what a killed writer left in a spool.

The spool names its URL (``.mxsidecar-url``); credentials come from the environment as
for the writer, or ``--storage-options`` (JSON).  Event files whose writer is still alive
are left to it.  Exit status 0 when everything is uploaded, 1 when something is left
(the message says what), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "upload",
        help="upload the event files a killed writer left in a spool directory (a URL logdir's)",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("spool", metavar="SPOOL", help="the spool directory (spool_dir=, or ~/.cache/mxsidecar/spool/...)")
    p.add_argument("--storage-options", type=json.loads, default={}, help="fsspec options, a JSON object")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to keep retrying (default 600)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from .output import spool, uploader
    from .output.remote import RemoteDirectory

    try:
        url = spool.read_url(args.spool)
    except FileNotFoundError:
        sys.stderr.write(f"{args.spool}: not a spool directory (no {spool.URL_FILE})\n")
        return 2
    out = RemoteDirectory(args.spool, url, args.storage_options, lambda path: None, (os.getpid(), 0))
    n = len(out.recovered)
    try:
        out.uploader.close(args.timeout)
    except uploader.UploadError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    finally:
        out._live.release()
    print(f"{n} files uploaded from {args.spool} to {url}")
    return 0
