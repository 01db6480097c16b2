"""``xlabridge autocast-audit [--json] [--parity]``: render the audit for a terminal or a pipe."""

from __future__ import annotations

import sys
from typing import TextIO


def audit_command(as_json: bool = False, parity: bool = False, stream: TextIO | None = None) -> int:
    """Run the audit and write it to ``stream`` (stdout); the exit status (0).

    ``as_json``: machine-readable output (``AuditReport.to_json()``). ``parity``: call
    ``enable_parity()`` first, to see the lists as they are after it.
    """
    from xlabridge.autocast._audit import audit
    from xlabridge.autocast._registration import enable_parity

    out = stream if stream is not None else sys.stdout
    if parity:
        enable_parity()
    report = audit()
    out.write((report.to_json() if as_json else str(report)) + "\n")
    return 0
