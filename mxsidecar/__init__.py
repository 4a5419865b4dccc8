"""mxsidecar: a TensorBoard writer for Apache MXNet that costs training nothing.

The training process copies array bytes into shared memory and enqueues small
descriptors; a sidecar process does the encoding and the file writing.  See
:class:`SidecarWriter`.
"""

from .errors import BackpressureTimeout, MxSidecarError, SidecarError, WriterClosed
from .writer import SidecarWriter, SummaryWriter

__all__ = [
    "BackpressureTimeout",
    "MxSidecarError",
    "SidecarError",
    "SidecarWriter",
    "SummaryWriter",
    "WriterClosed",
]
__version__ = "0.1.0"
