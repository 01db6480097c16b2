"""Loaded at start-up by every Python process of a command run under ``xlabridge report``.

It starts collecting in this process (its events go to its log as they come), then hands over
to any ``sitecustomize`` module that this one shadows.
"""

import importlib.machinery
import importlib.util
import os
import sys


_COMPILE_WORKERS = (os.path.join("torch", "_inductor", "compile_worker", ""), "torch._inductor.compile_worker")
"""How inductor starts its compile workers: their work is the parent's inductor compile (its
``backend compile`` share covers the wait on them), not a process of the user's program; not
observed (they also outlive a parent killed by a signal)."""


def _compile_worker() -> bool:
    return any(marker in arg for arg in getattr(sys, "orig_argv", sys.argv) for marker in _COMPILE_WORKERS)


def _start_collecting() -> None:
    from xlabridge import _env

    directory = _env.get(_env.REPORT_DIR)
    if not directory or _compile_worker():
        return
    try:
        from xlabridge.diagnostics._observe import pod as _pod, process as _process

        stall = _env.get(_env.STALL_AFTER)
        _process.observe_until_exit(
            directory, capture_hlo=_env.get(_env.CAPTURE_HLO) == "1", pod=_pod.wanted(),
            stall_after=float(stall) if stall else None, run_id=_env.get(_env.RUN_ID) or "",
        )
    except Exception as error:
        sys.stderr.write(f"xlabridge: diagnostics are off in this process ({type(error).__name__}: {error})\n")


def _chain_to_shadowed_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    shadowed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shadowed)


_start_collecting()
_chain_to_shadowed_sitecustomize()
