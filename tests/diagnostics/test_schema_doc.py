"""``docs/report-schema.md`` is generated from the code and must not drift from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from xlabridge.diagnostics import _schema_doc
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics import report as rp

DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"


def test_the_schema_document_is_what_the_code_generates() -> None:
    assert DOC.read_text(encoding="utf-8") == _schema_doc.render(), (
        "docs/report-schema.md is stale: python -m xlabridge.diagnostics._schema_doc > docs/report-schema.md"
    )


def test_every_field_of_the_json_forms_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for key in rp.Report().to_dict():
        assert f"| `{key}` |" in text, key
    kinds = [*ev.EVENT_CLASSES.values(), rp.XlaGraph, rp.DynamoBreak, rp.HloBreak, rp.Recompile, rp.TimeSplit]
    for cls in kinds:
        for field in dataclasses.fields(cls):
            assert field.metadata.get("doc"), f"{cls.__name__}.{field.name} has no documentation"
            assert f"| `{field.name}` |" in text, f"{cls.__name__}.{field.name}"
    for event_type in ev.EventType:
        assert f"### `{event_type.value}`" in text
