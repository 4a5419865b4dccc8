"""mxsidecar: a TensorBoard writer for Apache MXNet that costs training nothing.

The training process copies array bytes into shared memory and enqueues small
descriptors; a sidecar process does the encoding and the file writing.  See
:class:`SidecarWriter`, and ``ARCHITECTURE.md`` beside this file for the data flow
and which directory runs in which process:

    training/   the training process: the writer, argument checks, capture, backpressure
    wire/       what both processes share: descriptors, framing, the shared-memory arena
    sidecar/    the sidecar process: the loop, the encoders, the output layer
    formats/    TensorBoard's file formats (records, protobuf), for writing and reading
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import BackpressureTimeout, MxSidecarError, SidecarError, WriterClosed

if TYPE_CHECKING:
    from .training.writer import SidecarWriter, SummaryWriter

__all__ = [
    "BackpressureTimeout",
    "MxSidecarError",
    "SidecarError",
    "SidecarWriter",
    "SummaryWriter",
    "WriterClosed",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The writer is imported on first use, not with the package: the sidecar process
    # (python -m mxsidecar.sidecar) imports this package too, and must not load the
    # training side (tests/test_layering.py).
    if name in ("SidecarWriter", "SummaryWriter"):
        from .training import writer

        return getattr(writer, name)
    raise AttributeError(f"module 'mxsidecar' has no attribute {name!r}")
