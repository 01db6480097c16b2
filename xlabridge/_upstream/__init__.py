"""Every private torch, torch_xla, torch_tpu and libtpu surface xlabridge calls, wrapped once.

One module per upstream: ``torch``, ``torch_xla``, ``torch_tpu`` and ``jax`` (the JAX and jaxlib
internals through which xlabridge drives libtpu's compile-only client and XLA's partitioner). Each
wrapper names the private surface it reaches and the releases it was checked on (``_registry``), so
that a release that moves one fails here, by name (``tests/upstream`` calls every wrapper in each CI
environment), with an ``UpstreamChangedError`` that says so. No other module of xlabridge reaches a
private upstream name (``tests/upstream/test_private_access.py``). The probes of
``xlabridge.diagnostics`` patch upstream functions to observe them, on the modules and classes these
wrappers hand them; everything else calls through the wrappers. Importing these modules imports no
upstream package: each wrapper imports what it reaches when called. ``imports`` holds the one import
hook: a callback when a module is first imported, without importing it.
"""
