"""Collecting over a whole process, for ``xlabridge report``: started at interpreter start-up,
written as JSON when the process exits, normally or through an uncaught exception."""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from xlabridge.diagnostics import _hooks
from xlabridge.diagnostics._collector import Collector

def collect_until_exit(directory: str) -> None:
    """Observe this process from now on; at exit write ``report-<pid>.json`` into ``directory``."""
    collector = Collector()
    _hooks.activate(collector)

    def write() -> None:
        _hooks.deactivate(collector)
        collector.finish()
        path = Path(directory) / f"report-{os.getpid()}.json"
        collector.report.to_json(path)

    atexit.register(write)
