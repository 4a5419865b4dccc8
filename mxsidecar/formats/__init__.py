"""TensorBoard's on-disk formats: TFRecord framing (``records``) and the protobuf
messages (``proto``), sans-IO.

The sidecar's output layer writes with them; ``python -m mxsidecar inspect`` and
``SidecarWriter.export_scalars`` read with them.  They know nothing of either process.
"""
