"""The sidecar process's side: ``python -m mxsidecar.sidecar``.

``process`` (command line, priority, signals, exit status) runs ``loop`` (receive
descriptors, dispatch, report progress), which turns arrays into Summary values with
``encoders/`` and writes through ``output/``.  Nothing here imports the training side
or mxnet (see ``../ARCHITECTURE.md``).
"""
