"""The training process's side: everything here runs in the user's process.

``writer`` (the public ``SidecarWriter``) and ``kinds/`` check arguments in the
caller's thread; ``pipeline`` numbers items and admits them (``backpressure``);
``capture`` copies arrays into the shared-memory arena (an engine copy for NDArrays)
and its completion thread sends descriptors; ``feedback`` handles what the sidecar
sends back; ``supervisor`` starts, watches and stops the sidecar process.  Nothing
here encodes or writes files (see ``../ARCHITECTURE.md``).
"""
