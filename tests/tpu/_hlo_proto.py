"""An independent kernel count: walks the optimized HloModuleProto's structure.

The reference for ``xlabridge.hlo.parse_kernels`` (which reads HLO *text* with regular
expressions): here the binary proto is decoded with a small protobuf wire-format reader (field
numbers from XLA's ``xla/service/hlo.proto``), and the entry computation's instructions are
walked by opcode, following ``call`` instructions into the computations they call.
"""

from __future__ import annotations

from collections.abc import Iterator

# HloModuleProto, HloComputationProto and HloInstructionProto field numbers.
_MODULE_COMPUTATIONS, _MODULE_ENTRY_ID = 3, 6
_COMPUTATION_INSTRUCTIONS, _COMPUTATION_ID = 2, 5
_INSTRUCTION_NAME, _INSTRUCTION_OPCODE, _FUSION_KIND, _CUSTOM_CALL_TARGET, _CALLED_IDS = 1, 2, 11, 28, 38

_FREE = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all", "opt-barrier",
         "partition-id", "replica-id", "async-update"}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def _instruction(data: bytes) -> dict:
    fields = {"name": "", "opcode": "", "fusion_kind": "", "target": "", "called": []}
    for number, wire, value in _fields(data):
        if number == _INSTRUCTION_NAME:
            fields["name"] = value.decode()
        elif number == _INSTRUCTION_OPCODE:
            fields["opcode"] = value.decode()
        elif number == _FUSION_KIND:
            fields["fusion_kind"] = value.decode()
        elif number == _CUSTOM_CALL_TARGET:
            fields["target"] = value.decode()
        elif number == _CALLED_IDS:
            if wire == 2:  # packed
                i = 0
                while i < len(value):
                    called, i = _varint(value, i)
                    fields["called"].append(called)
            else:
                fields["called"].append(value)
    return fields


def kernels(module_proto: bytes) -> list[str]:
    """Kernel names of the entry computation, named as ``parse_kernels`` names them."""
    computations: dict[int, list[dict]] = {}
    entry = None
    for number, _, value in _fields(module_proto):
        if number == _MODULE_ENTRY_ID:
            entry = value
        elif number == _MODULE_COMPUTATIONS:
            instructions, ident = [], None
            for field, _, item in _fields(value):
                if field == _COMPUTATION_INSTRUCTIONS:
                    instructions.append(_instruction(item))
                elif field == _COMPUTATION_ID:
                    ident = item
            computations[ident] = instructions
    found: list[str] = []

    def walk(ident: int) -> None:
        for instruction in computations[ident]:
            opcode = instruction["opcode"]
            if opcode in _FREE or opcode.endswith("-done"):
                continue
            if opcode == "call":
                for called in instruction["called"]:
                    walk(called)
            elif opcode == "fusion":
                found.append(f"fusion/{instruction['fusion_kind']}/{instruction['name']}")
            elif opcode == "custom-call":
                found.append(f"custom-call/{instruction['target']}")
            else:
                found.append(opcode)

    walk(entry)
    return found


def hlo_module(hlo_proto: bytes) -> bytes:
    """The HloModuleProto inside an HloProto (what XLA's ``--xla_dump_hlo_as_proto`` writes)."""
    for number, _, value in _fields(hlo_proto):
        if number == 1:
            return value
    raise ValueError("the HloProto holds no hlo_module")
