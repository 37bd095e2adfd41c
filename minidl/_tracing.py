"""The slot through which an exporter watches the ops a model runs (``minidl.onnx``'s tracer).

``active`` is None except while ``minidl.onnx.export`` traces a model: then every op declared in
the registry (``ops.registry``) and every ``Function.apply`` outside one passes through
``active.call``/``active.function``, which runs it and records it. Kept in a module of its own at
the bottom of the layers so that the autograd and the registry can look at it without importing
the exporter.
"""
active = None
