"""A logdir that is a URL (``s3://bucket/prefix/run``, ``gs://...``, any fsspec URL).

The constructor decides here, once, before any sidecar starts, whether the URL can be
written: an unknown scheme, a missing extra, a missing bucket or credentials that
cannot write are a ``ValueError`` in the caller's thread, not an error from the
sidecar minutes later (and never, as before, a local directory named ``s3:``).  The
sidecar writes to a local spool directory and uploads sealed files
(``sidecar/output/remote.py``); this module only checks and names things.

fsspec (and s3fs, gcsfs) are imported here, inside :func:`check_url`, and in the
sidecar: never by ``import mxsidecar``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from typing import Any, NamedTuple

__all__ = ["RemoteLogdir", "check_url", "is_url", "join", "resolve"]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# Schemes whose file system is a separate distribution: the extra that installs it.
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
_OBJECT_STORES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "oss", "r2")


class RemoteLogdir(NamedTuple):
    url: str  # what the user gave, without a trailing '/'
    storage_options: dict[str, Any]  # passed to fsspec as is (JSON-serializable: it crosses to the sidecar)
    spool: str  # the local directory the sidecar writes before uploading


def is_url(logdir: Any) -> bool:
    return isinstance(logdir, str) and bool(_URL.match(logdir))


def join(url: str, run: str) -> str:
    return f"{url}/{run}" if run else url


def resolve(
    logdir: Any, storage_options: Any, spool_dir: Any, run: str, writes: bool
) -> tuple[str, str, RemoteLogdir | None]:
    """The writer's logdir as (shown to the user, written locally, the remote target or None).

    ``run`` is the placement's sub-directory (``rank_k``).  A URL is checked (a probe
    object written) only on a rank that writes: the others touch nothing.
    """
    from . import arguments

    if is_url(logdir) and not logdir.startswith("file://"):
        shown = join(logdir.rstrip("/"), run)
        if not writes:
            return shown, shown, None
        target = check_url(logdir, storage_options, spool_dir)
        return shown, os.path.join(target.spool, run) if run else target.spool, target._replace(url=shown)
    if storage_options is not None or spool_dir is not None:
        raise ValueError("storage_options and spool_dir are for a URL logdir (s3://..., gs://...)")
    if isinstance(logdir, str) and logdir.startswith("file://"):
        logdir = logdir[len("file://") :]
    local = arguments.check_logdir(logdir)
    local = os.path.join(local, run) if run else local
    return local, local, None


def default_spool(url: str) -> str:
    """One directory per URL, under the user's cache: the same URL finds the same spool
    again (what a killed run left there is still on disk, with a predictable name)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "mxsidecar", "spool", hashlib.sha1(url.encode("utf-8")).hexdigest()[:16])


def _install_hint(scheme: str) -> str:
    extra = _EXTRAS.get(scheme)
    if extra:
        return f"pip install 'mxsidecar[{extra}]'"
    return "pip install fsspec and the file system package for this scheme"


def check_url(url: str, storage_options: Any, spool_dir: Any) -> RemoteLogdir:
    """Check that ``url`` can be written with ``storage_options``; ValueError or TypeError naming what is wrong."""
    if storage_options is None:
        storage_options = {}
    if not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict or None, got {type(storage_options).__name__}")
    try:
        json.dumps(storage_options)
    except (TypeError, ValueError):
        raise TypeError("storage_options must be JSON-serializable (it is passed to the sidecar process)") from None
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    url = f"{scheme}://{rest.rstrip('/')}"
    if scheme in _OBJECT_STORES and (not rest.strip("/") or rest.startswith("/")):
        raise ValueError(f"logdir {url!r} names no bucket; use {scheme}://BUCKET/PREFIX")
    try:
        import fsspec
    except ImportError:
        raise ValueError(f"logdir {url!r} is a URL; writing to it needs fsspec: {_install_hint(scheme)}") from None
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
    except ImportError as exc:
        raise ValueError(
            f"logdir {url!r} needs a package that is not installed: {_install_hint(scheme)} ({exc})"
        ) from None
    except ValueError as exc:
        if scheme not in fsspec.available_protocols():
            raise ValueError(
                f"logdir {url!r}: unknown URL scheme {scheme!r}; use a local path, or a scheme fsspec knows "
                "(s3://, gs://, memory://, ...)"
            ) from None
        raise ValueError(f"logdir {url!r}: {exc}") from None
    except TypeError as exc:
        raise ValueError(f"logdir {url!r}: storage_options not accepted by its file system: {exc}") from None
    _probe(fs, root.rstrip("/"), url)
    if spool_dir is None:
        spool = default_spool(url)
    elif isinstance(spool_dir, (str, os.PathLike)) and not isinstance(os.fspath(spool_dir), bytes):
        spool = os.path.abspath(os.path.expanduser(os.fspath(spool_dir)))
    else:
        raise TypeError(f"spool_dir must be a str path or None, got {type(spool_dir).__name__}")
    if os.path.exists(spool) and not os.path.isdir(spool):
        raise ValueError(f"spool_dir must be a directory, but {spool!r} is a file")
    return RemoteLogdir(url, storage_options, spool)


def _probe(fs: Any, root: str, url: str) -> None:
    """Write and delete one small object: the only check that catches a missing
    bucket, wrong credentials and read-only credentials alike, before training."""
    probe = f"{root}/.mxsidecar-probe-{uuid.uuid4().hex}"
    try:
        fs.pipe_file(probe, b"mxsidecar write check")
    except FileNotFoundError as exc:
        raise ValueError(f"logdir {url!r} cannot be written: the bucket or directory does not exist ({exc})") from None
    except PermissionError as exc:
        raise ValueError(
            f"logdir {url!r} cannot be written: permission denied; check the credentials ({exc})"
        ) from None
    except Exception as exc:  # each file system raises its own errors for the rest
        raise ValueError(f"logdir {url!r} cannot be written: {type(exc).__name__}: {exc}") from None
    try:
        fs.rm_file(probe)
    except Exception:
        pass  # write-only credentials: the probe stays, a few bytes the loaders ignore (not an event file)
