"""The sidecar's output layer: it owns every byte the sidecar writes.

``storage`` is the one interface the loop and the projector write through (a local
directory today; object stores are a second back end of the same interface),
``event_file`` appends framed events to one run's file, and ``projector`` writes
embedding files and merges ``projector_config.pbtxt`` atomically.
"""
