"""Protobuf messages for TensorBoard event files, under our own package.

The ``*.proto`` sources here are wire-compatible with TensorBoard's messages
(same field numbers, types and enum values) but declare the proto package
``mxsidecar.tb`` (``mxsidecar.tb.hparams`` for the hparams plugin), so they
can share a process with tensorboard's or TensorFlow's registrations without
clashing in the default descriptor pool (see awslabs/mxboard#49).

The ``*_pb2.py`` and ``*_pb2.pyi`` modules are generated; do not edit them.
Regenerate with::

    pip install grpcio-tools==1.74.0   # in a separate venv
    python mxsidecar/proto/generate.py

using protoc 31.1 (as bundled with grpcio-tools 1.74.0), which emits gencode
6.31.1 so the modules still import under our oldest supported runtime,
protobuf 6.31.1; generate.py refuses any other protoc major. Generated
modules are excluded from lint.
"""
