"""HLO module text as data: computations, instructions, shapes, attributes and metadata.

Reads the text XLA prints for a module (``HloModule::ToString``: an ``--xla_dump_to`` file,
JAX's ``compiled.as_text()``, torch_xla's save-tensors file, libtpu's optimized HLO), before or
after optimization. Operands are printed with their shapes before optimization
(``f32[8,16]{1,0} %p0``) and without after it (``%param``); shapes of bare operands are looked
up among the computation's instructions. Only the structure is read: no value is evaluated.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["Computation", "Instruction", "Module", "array_bytes", "parse_module", "split_top_level"]

# Bytes per element of each XLA primitive type (sub-byte types round up to one byte per
# element only where XLA packs them: here they are counted at their bit width).
_ELEMENT_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e3m4": 8,
    "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f4e2m1fn": 4, "f8e8m0fnu": 8,
    "token": 0, "opaque": 0,
}
_ARRAY = re.compile(r"(?P<type>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")
_HEADER = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(]+)\s*(?:\(|\{)")
_ASSIGN = re.compile(r"^(?P<root>ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*")
_OPCODE = re.compile(r"\s*(?P<opcode>[a-z][\w\-]*)\(")
_COMMENT = re.compile(r"/\*.*?\*/")
_OPERAND_NAME = re.compile(r"%?(?P<name>[\w.\-]+)\s*$")
_MODULE = re.compile(r"^HloModule\s+(?P<name>[^\s,]+)(?P<rest>.*)$")


def array_bytes(shape: str) -> int:
    """Bytes of every array in ``shape`` (``f32[8,16]{1,0}``, or a tuple of them).

    Dynamic dimensions (``<=8``) count at their bound; layouts and tiling are ignored.
    """
    total = 0
    for match in _ARRAY.finditer(_COMMENT.sub("", shape)):
        bits = _ELEMENT_BITS.get(match.group("type"))
        if bits is None:
            raise ValueError(f"unknown XLA element type {match.group('type')!r} in shape {shape!r}")
        elements = 1
        for dim in match.group("dims").split(","):
            dim = dim.strip().lstrip("<=")
            if dim:
                elements *= int(dim)
        total += (elements * bits + 7) // 8
    return total


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """``text`` split at ``separator`` outside brackets, braces, parentheses and quotes."""
    parts, depth, start, quoted, i = [], 0, 0, False, 0
    while i < len(text):
        char = text[i]
        if quoted:
            if char == "\\":
                i += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _closing(text: str, start: int) -> int:
    """Index just past the bracket group that opens at ``text[start]``."""
    depth, quoted, i = 0, False, start
    while i < len(text):
        char = text[i]
        if quoted:
            if char == "\\":
                i += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced brackets in HLO text: {text[:200]!r}")


def _metadata(value: str) -> dict[str, str]:
    """``{op_type="aten__mm" source_line=12}`` as a dict of strings."""
    fields = {}
    for match in re.finditer(r'(?P<key>\w+)=(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s}]+))', value.strip()[1:-1]):
        fields[match.group("key")] = match.group("quoted") if match.group("quoted") is not None else match.group("bare")
    return fields


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One HLO instruction: ``name = shape opcode(operands), attributes``."""

    name: str
    opcode: str
    shape: str
    operands: tuple[str, ...]
    operand_shapes: tuple[str | None, ...]
    attributes: dict[str, str]
    metadata: dict[str, str]
    is_root: bool = False
    literal: str = ""
    """What a ``parameter``'s or ``constant``'s parentheses hold: its number, or its value."""

    def called(self) -> dict[str, tuple[str, ...]]:
        """Computations this instruction calls, by attribute (``calls``, ``body``, ``to_apply``...)."""
        called = {}
        for key in ("calls", "to_apply", "body", "condition", "true_computation", "false_computation",
                    "branch_computations"):
            if key in self.attributes:
                names = self.attributes[key].strip("{}")
                called[key] = tuple(name.strip().lstrip("%") for name in names.split(",") if name.strip())
        return called


@dataclasses.dataclass(frozen=True)
class Computation:
    name: str
    is_entry: bool
    instructions: tuple[Instruction, ...]

    def by_name(self) -> dict[str, Instruction]:
        return {instruction.name: instruction for instruction in self.instructions}


@dataclasses.dataclass(frozen=True)
class Module:
    """A parsed HLO module: its computations (by name), the entry's name and header attributes."""

    name: str
    attributes: dict[str, str]
    computations: dict[str, Computation]
    entry: str

    @property
    def num_partitions(self) -> int:
        return int(self.attributes.get("num_partitions", "1"))

    @property
    def replica_count(self) -> int:
        return int(self.attributes.get("replica_count", "1"))


def _instruction(line: str, shapes: dict[str, str]) -> Instruction | None:
    line = _COMMENT.sub("", line).strip()
    assign = _ASSIGN.match(line)
    if not assign:
        return None
    rest = line[assign.end():]
    if rest.startswith("("):
        shape_end = _closing(rest, 0)
    else:
        shape_end = re.match(r"[^\s]+", rest).end()
    shape = rest[:shape_end]
    opcode = _OPCODE.match(rest[shape_end:])
    if not opcode:
        return None
    operands_start = shape_end + opcode.end() - 1
    operands_end = _closing(rest, operands_start)
    operands, operand_shapes = [], []
    # A constant's or parameter's parentheses hold a literal or a number, not operands.
    inside = rest[operands_start + 1 : operands_end - 1]
    literal = inside.strip() if opcode.group("opcode") in ("constant", "parameter") else ""
    for operand in split_top_level("" if literal else inside):
        name = _OPERAND_NAME.search(operand)
        if not name:
            continue
        operands.append(name.group("name"))
        printed = operand[: name.start()].strip()
        operand_shapes.append(printed or shapes.get(name.group("name")))
    attributes = {}
    for attribute in split_top_level(rest[operands_end:].lstrip(", ")):
        key, _, value = attribute.partition("=")
        attributes[key.strip()] = value.strip()
    metadata = _metadata(attributes.pop("metadata")) if "metadata" in attributes else {}
    return Instruction(
        name=assign.group("name"),
        opcode=opcode.group("opcode"),
        shape=shape,
        operands=tuple(operands),
        operand_shapes=tuple(operand_shapes),
        attributes=attributes,
        metadata=metadata,
        is_root=bool(assign.group("root")),
        literal=literal,
    )


def parse_module(text: str) -> Module:
    """Parse HLO module text (one module; text before ``HloModule`` is ignored)."""
    name, header_attributes = "", {}
    computations: dict[str, Computation] = {}
    entry = ""
    current: str | None = None
    is_entry = False
    instructions: list[Instruction] = []
    shapes: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if current is None:
            module = _MODULE.match(line)
            if module:
                name = module.group("name")
                for attribute in split_top_level(module.group("rest").lstrip(", ")):
                    key, _, value = attribute.partition("=")
                    header_attributes[key.strip()] = value.strip()
                continue
            header = _HEADER.match(line)
            if header and line.endswith("{"):
                current, is_entry = header.group("name"), bool(header.group("entry"))
                instructions, shapes = [], {}
            continue
        if line == "}":
            computations[current] = Computation(current, is_entry, tuple(instructions))
            if is_entry:
                entry = current
            current = None
            continue
        instruction = _instruction(line, shapes)
        if instruction is not None:
            instructions.append(instruction)
            shapes[instruction.name] = instruction.shape
    if not entry:
        raise ValueError("the HLO text has no ENTRY computation")
    # Operands printed without shapes that are defined later in the text (rare, but allowed in
    # unscheduled modules) are resolved once every instruction is known.
    resolved = {}
    for computation in computations.values():
        known = {instruction.name: instruction.shape for instruction in computation.instructions}
        resolved[computation.name] = dataclasses.replace(
            computation,
            instructions=tuple(
                dataclasses.replace(
                    instruction,
                    operand_shapes=tuple(
                        shape if shape is not None else known.get(operand)
                        for operand, shape in zip(instruction.operands, instruction.operand_shapes)
                    ),
                )
                for instruction in computation.instructions
            ),
        )
    return Module(name=name, attributes=header_attributes, computations=resolved, entry=entry)
