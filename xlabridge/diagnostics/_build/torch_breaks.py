"""A graph break as torch writes it, read back: its type, explanation, hints, code, user stack.

Dynamo writes each graph break into its structured trace as a ``dynamo_graph_break_reason``
artifact (``symbolic_convert.log_graph_break``; ``TORCH_LOGS=graph_breaks`` prints the same text,
tlparse lists the artifact), in one of two forms:

* a break it resumes after: ``Graph break in user code at FILE:LINE``, ``Graph Break Reason:``
  and the break's message (on torch 2.15 after a line naming the bytecode it was tracing), then
  ``User code traceback:`` and the stack;
* a break that makes it skip the frame (torch 2.15, ``convert_frame``): ``Graph break:
  torch.compile cannot properly resume from this graph break, which results in a skip.``, the
  stack, and the exception whose message is the break's.

The message is ``format_graph_break_message``'s (torch 2.8 and later): the break's type on a line
of its own, ``  Explanation:``, ``  Hint:`` lines, ``  Developer debug context:`` and, on torch
2.9 and later, the page of its code (``.../gb/gb0291.html``). Torch 2.8 names no code; its
registry (``graph_break_registry.json``) maps the type to the code later torch prints.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from xlabridge.diagnostics import _frames
from xlabridge.diagnostics import events as ev

_AT = re.compile(r"^Graph break(?: \(user stack suppressed[^)]*\))? in user code at (?P<file>.+):(?P<line>\d+)\s*$", re.M)
_REASON = "Graph Break Reason:"
_STACK = "User code traceback:"
_SKIP_STACK = "The graph break occurred in the following user code:"
_ATTRIBUTION = "\nStack variable source attribution:"
_TRACEBACK = "\nTraceback (most recent call last):"
_EXCEPTION = re.compile(r"^torch\._dynamo\.exc\.\w+: ", re.M)
_PAGE = re.compile(r"(https?://\S+/gb/gb(\d+)\.html)")
_FROM_USER_CODE = "\nfrom user code:"


@dataclasses.dataclass(frozen=True)
class BreakText:
    """What torch's text of one graph break says."""

    reason: str
    """The break's message as torch gives it (after ``Graph Break Reason:``)."""
    gb_type: str
    """The break's type: the line above its explanation (``logging.Logger method not supported ...``)."""
    explanation: str
    hints: tuple[str, ...]
    code: str
    """``GB0291``, from the page torch names, else from its registry by type; ``""`` if neither has one."""
    url: str
    frames: tuple[ev.Frame, ...]
    """The user stack torch gives, outermost first."""
    location: ev.Frame | None
    """Where torch says the break is (``Graph break in user code at FILE:LINE``)."""
    skipped_frame: bool
    """The break made Dynamo skip the rest of the frame (it could not resume after it)."""


def _section(text: str, start: str, ends: tuple[str, ...]) -> str:
    _, found, rest = text.partition(start)
    if not found:
        return ""
    cut = min((i for i in (rest.find(end) for end in ends) if i >= 0), default=len(rest))
    return rest[:cut]


def _labelled(message: str, label: str) -> list[str]:
    """Each ``  Label: ...`` paragraph of ``message`` (continuation lines are indented further)."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for line in message.splitlines():
        if line.startswith(f"  {label}: "):
            current = [line[len(label) + 4:].strip()]
            found.append(current)
        elif current is not None and line.startswith("    ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return [" ".join(parts) for parts in found]


def parse(text: str) -> BreakText:
    """Read torch's text of one graph break (``TorchBreak.text``)."""
    skipped = text.startswith("Graph break: torch.compile cannot properly resume") or "skipping the rest of the function" in text
    if _REASON in text:
        reason = _section(text, _REASON, (_ATTRIBUTION, "\n" + _STACK, _TRACEBACK)).strip()
        stack = _section(text, _STACK, (_TRACEBACK,))
    else:
        exception = _EXCEPTION.search(text)
        reason = text[exception.end():].split(_FROM_USER_CODE)[0].strip() if exception else text.strip()
        stack = _section(text, _SKIP_STACK, (_TRACEBACK, "\ntorch._dynamo.exc."))
    lines = reason.splitlines()
    explained = next((i for i, line in enumerate(lines) if line.startswith("  Explanation:")), None)
    if explained:
        gb_type = next((line.strip() for line in reversed(lines[:explained]) if line.strip()), "")
    else:
        gb_type = next((line.strip() for line in lines if line.strip()), "")
    explanation = " ".join(_labelled(reason, "Explanation"))
    page = _PAGE.search(reason)
    code, url = (f"GB{page.group(2)}", page.group(1)) if page else (registry_code(gb_type), "")
    frames = tuple(_frames.from_stack_trace(stack))
    at = _AT.search(text)
    location = ev.Frame(at["file"], int(at["line"]), "") if at else (frames[-1] if frames else None)
    return BreakText(reason=reason, gb_type=gb_type, explanation=explanation,
                     hints=tuple(_labelled(reason, "Hint")), code=code, url=url, frames=frames,
                     location=location, skipped_frame=skipped)


def registry_code(gb_type: str) -> str:
    """The code torch's graph-break registry gives ``gb_type`` (``GB0059``), or ``""``."""
    return _registry().get(gb_type, "")


@functools.cache
def _registry() -> dict[str, str]:
    from xlabridge._upstream import torch as upstream_torch

    try:
        return upstream_torch.graph_break_codes()
    except (ImportError, OSError, ValueError):  # no torch, or a torch without the registry: no code
        return {}
