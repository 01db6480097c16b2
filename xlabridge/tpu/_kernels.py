"""The kernels of optimized HLO text: each fusion, each custom call, and each other operation
that does work (see ``xlabridge.hlo`` for what counts). A leaf module, so that both
``xlabridge.hlo`` (kernel counts of torch functions) and ``xlabridge.tpu`` (the TPU compile
results) use it without importing each other."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xlabridge.tpu._result import TpuCompileResult

_FREE_OPCODES = frozenset(
    {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all", "opt-barrier", "partition-id", "replica-id"}
)
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?:\([^=]*?\)|\S+)\s+(?P<opcode>[\w\-]+)\(")
_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[\w.\-]+)\s.*\{\s*$")
_CALLEE = re.compile(r"to_apply=%?(?P<callee>[\w.\-]+)")
_FUSION_KIND = re.compile(r"kind=(?P<kind>k\w+)")
_CUSTOM_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]+)"')


@dataclasses.dataclass(frozen=True)
class KernelReport:
    """Kernels of an optimized HLO module's entry computation.

    ``kernels`` names each one (``fusion/kLoop/<name>``, ``custom-call/<target>``, or the opcode
    of an unfused operation); ``hlo`` is the optimized module text; ``tpu`` is the full TPU
    compile result when the count was made for a TPU target.
    """

    count: int
    kernels: tuple[str, ...]
    hlo: str
    tpu: TpuCompileResult | None = dataclasses.field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.count} kernel(s): " + ", ".join(self.kernels)


def _computations(hlo_text: str) -> tuple[dict[str, list[str]], str]:
    bodies: dict[str, list[str]] = {}
    entry, current = "", None
    for line in hlo_text.splitlines():
        if current is None:
            match = _COMPUTATION.match(line)
            if match:
                current = match.group("name")
                bodies[current] = []
                if match.group("entry"):
                    entry = current
        elif line.strip() == "}":
            current = None
        else:
            bodies[current].append(line)
    if not entry:
        raise ValueError("the HLO text has no ENTRY computation")
    return bodies, entry


def parse_kernels(hlo_text: str) -> KernelReport:
    """Count the kernels of optimized HLO text (see the module docstring for what counts)."""
    bodies, entry = _computations(hlo_text)
    kernels: list[str] = []

    def visit(name: str) -> None:
        for line in bodies[name]:
            match = _INSTRUCTION.match(line)
            if not match:
                continue
            opcode = match.group("opcode")
            if opcode in _FREE_OPCODES or opcode.endswith("-done") or opcode == "async-update":
                continue
            if opcode == "call" and (callee := _CALLEE.search(line)) and callee.group("callee") in bodies:
                visit(callee.group("callee"))
            elif opcode == "fusion":
                kind = _FUSION_KIND.search(line)
                kernels.append(f"fusion/{kind.group('kind') if kind else '?'}/{match.group('name')}")
            elif opcode == "custom-call":
                target = _CUSTOM_TARGET.search(line)
                kernels.append(f"custom-call/{target.group('target') if target else '?'}")
            else:
                kernels.append(opcode)

    visit(entry)
    return KernelReport(count=len(kernels), kernels=tuple(kernels), hlo=hlo_text)
