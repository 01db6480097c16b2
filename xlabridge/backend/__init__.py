"""The ``xlabridge`` torch.compile backend, and the path each Dynamo graph takes through it.

``torch.compile(model, backend="xlabridge")`` finds ``xlabridge_backend`` by name, through
torch's ``torch_dynamo_backends`` entry point. For each graph Dynamo hands it, the backend
decides where the graph runs (``_placement``: XLA, TorchTPU or inductor) and, on XLA, how it
is compiled (``_path``: forward-only, traced to aten ops by ``_forward_only``, or through
AOTAutograd as ``openxla`` compiles every graph), after checking its options (``_options``)
and configuring the persistent XLA compilation cache (``cache``). ``compile`` is
``torch.compile`` with this backend and errors that name the bad argument.
"""

from xlabridge.backend import cache
from xlabridge.backend._backend import xlabridge_backend
from xlabridge.backend._compile import compile
from xlabridge.backend._options import BackendOptions

__all__ = ["BackendOptions", "cache", "compile", "xlabridge_backend"]
