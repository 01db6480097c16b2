"""Dataclass fields that carry their documentation, for the diagnostics' event and report types.

``docs/report-schema.md`` is generated from these docs (``xlabridge.diagnostics._schema_doc``),
so the schema document and the code cannot drift apart. A leaf module: it imports nothing of
xlabridge, so the event types and the report's data types can both use it.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def field(doc: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field documented by ``doc`` (read back from ``metadata["doc"]``)."""
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})
