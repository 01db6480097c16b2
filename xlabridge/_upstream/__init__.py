"""Every private torch, torch_xla, torch_tpu and libtpu surface xlabridge calls, wrapped once.

One module per upstream; each wrapper names the private surface it reaches and the releases it
was checked on, so that a release that moves one fails here, by name (``tests/upstream``
calls every wrapper in each CI environment). The probes of ``xlabridge.diagnostics`` patch
upstream functions to observe them; everything else calls through these wrappers. ``imports``
holds the one import hook: a callback when a module is first imported, without importing it.
"""
