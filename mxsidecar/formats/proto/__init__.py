"""Protobuf messages for TensorBoard event files, under our own package.

The ``*.proto`` sources here are wire-compatible with TensorBoard's messages
(same field numbers, types and enum values) but declare the proto package
``mxsidecar.tb`` (``mxsidecar.tb.hparams`` for the hparams plugin), so they
can share a process with tensorboard's or TensorFlow's registrations without
clashing in the default descriptor pool (see awslabs/mxboard#49).

The ``*_pb2.py`` and ``*_pb2.pyi`` modules are generated; do not edit them.
Regenerate with::

    pip install grpcio-tools==1.74.0   # in a separate venv
    python mxsidecar/formats/proto/generate.py

Each ``*_pb2.py`` is not protoc's Python gencode but its file's serialized
descriptor, built into classes at import by ``_runtime.py`` with whatever protobuf
is installed (3.20 to 7.x, C or pure Python), in a descriptor pool of our own;
the ``.pyi`` stubs are protoc's, for type checkers.  ``_runtime.py`` says why.
Generated modules are excluded from lint.
"""
