"""The wire: what both processes share, and nothing else.

``descriptors`` (what crosses the boundary, and its byte layout), ``framing`` (those
bytes over a Unix socket, EOF as "the other side is gone") and ``arena`` (the
shared-memory segment that carries arrays, and its span allocator).  Both the
training side and the sidecar import these modules; they import neither side, nor
numpy, protobuf or mxnet (``tests/test_layering.py``).
"""
