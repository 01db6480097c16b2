"""Requests to compile that Dynamo skips: ``Module.compile()`` on a module whose code is torch's own.

Dynamo's frame callback skips frames of torch's own files (``trace_rules.check``). ``Module.compile()``
on torch 2.8 and 2.9 hands Dynamo ``Module._call_impl``, which it skips, and then the module's
``forward``: where that is torch's too (``nn.Sequential``, ``nn.TransformerEncoderLayer``), nothing
of the module is compiled, only the modules of the user's inside it, each as a frame of its own, and
no report shows a graph for it. torch says so only at debug level (``TORCH_LOGS=+dynamo``:
``skipping: _call_impl (reason: in skipfiles, ...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics.report import Finding


def _short(frame: ev.Frame) -> str:
    path = frame.filename.replace("\\", "/")
    if "/torch/" in path:
        path = "torch/" + path.rsplit("/torch/", 1)[1]
    return f"{frame.function} ({path}:{frame.lineno})"


def skipped_finding(request: ev.CompileRequest, where: dict[str, Any], user_compiled: Sequence[ev.Frame],
                    pid: int) -> Finding:
    """The finding for a request whose target Dynamo skips, ``where`` the user's line that asked."""
    call = "Module.compile()" if request.how == "Module.compile" else f"{request.how}()"
    skipped = " and ".join(_short(f) for f in request.skipped)
    compiled = ("only the modules of yours inside it are compiled, each as a frame of its own" if user_compiled
                else "Dynamo compiled no code of yours in this process")
    fix = ("compile the module with `model = torch.compile(model)`, which wraps its call so that Dynamo traces it"
           if request.how == "Module.compile" else "compile a function of yours that calls it")
    return Finding(
        "compile-skipped",
        f"{call} of {request.target} compiles nothing of {request.target} itself: Dynamo skips {skipped}, torch's own "
        f"code (with TORCH_LOGS=+dynamo torch logs 'skipping: {request.skipped[0].function} (reason: in "
        f"skipfiles ...)'); {compiled}. Fix: {fix} (torch 2.15 traces Module.compile() itself).",
        count=1, category=request.how, pid=pid, **where,
    )
