"""Why a compiled model is split: Dynamo graph breaks, HLO lowering breaks, recompilations.

``explain(fn)(*args)`` runs ``fn`` once under the xlabridge backend and returns a ``Report``;
``with diagnose() as report:`` collects over a whole training loop compiled with
``backend="xlabridge"`` or ``backend="openxla"``; ``compare(step, *args)`` runs one step
lazily and compiled, side by side, to tell which kind of break costs the time.
"""

from xlabridge.diagnostics._api import diagnose, explain
from xlabridge.diagnostics.compare import Comparison, compare
from xlabridge.diagnostics.report import SCHEMA, Report

__all__ = ["SCHEMA", "Comparison", "Report", "compare", "diagnose", "explain"]
