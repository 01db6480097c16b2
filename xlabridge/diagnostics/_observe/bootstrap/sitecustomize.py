"""Loaded at start-up by every Python process of a command run under ``xlabridge report``.

It starts collecting in this process (its events go to its log as they come), then hands over
to any ``sitecustomize`` module that this one shadows.
"""

import importlib.machinery
import importlib.util
import os
import sys


_HELPERS = (os.path.join("torch", "_inductor", "compile_worker", ""),)
"""Programs torch starts for itself (inductor's compile workers, which outlive a parent killed by a
signal): not the user's, not observed."""


def _start_collecting() -> None:
    from xlabridge import _env

    directory = _env.get(_env.REPORT_DIR)
    if not directory:
        return
    program = sys.argv[0] if sys.argv else ""
    if any(helper in program for helper in _HELPERS):
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
