"""``python -m mxsidecar.sidecar``: how the training side starts a sidecar."""

import sys

from .process import main

sys.exit(main())
