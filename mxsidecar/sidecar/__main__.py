"""``python -m mxsidecar.sidecar``: how the training side starts a sidecar.

The process ends with ``os._exit``, not ``sys.exit``: by the time ``main`` returns,
every path through it has closed (so fsynced) the event files itself, and what is
left to interpreter teardown (collecting numpy's and protobuf's modules) buys
nothing but time, 30-60 ms measured, which ``close()`` in the trainer waits for
(perf/bench_close.py).  Only Python's own buffers need flushing first.
"""

import os
import sys

from .process import main

code = main()
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except (OSError, ValueError):  # a closed or broken stream: nothing more to say
        pass
os._exit(code)
