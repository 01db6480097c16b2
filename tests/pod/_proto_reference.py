"""Reference count of a module's collectives, from its binary HLO proto (not from the text).

``xlabridge.pod`` reads collectives from HLO *text* with a parser of its own; this reads the
serialized ``HloProto``/``HloModuleProto`` XLA dumps beside it: instructions by opcode, shapes
from ``ShapeProto`` (element type enum and dimensions), device groups from ``ReplicaGroup``
lists or the ``IotaReplicaGroupListProto``, trip counts from the while loop's backend config
JSON. Field numbers are those of XLA's ``hlo.proto`` and ``xla_data.proto``. It applies the
rules ``xlabridge.pod._collectives`` documents (an async pair counts once; bytes: an
all-gather's result, a reduce-scatter's operands, the others' result; executions multiplied by
known trip counts), so each test compares two readings of one compiled module.
"""

from __future__ import annotations

import json

import numpy as np

_KINDS = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute", "collective-broadcast"}
# xla.PrimitiveType -> bytes per element (sub-byte types do not occur in these tests).
_ELEMENT_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 2, 8: 4, 9: 8, 10: 2, 11: 4, 12: 8, 15: 8, 16: 2, 18: 16,
                  19: 1, 20: 1, 23: 1, 24: 1, 25: 1, 28: 1, 29: 1, 33: 1, 13: 0, 14: 0, 17: 0}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 128:
            return result, i


def _message(data: bytes) -> dict[int, list]:
    fields: dict[int, list] = {}
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, i = data[i : i + width], i + width
        else:
            raise ValueError(wire)
        fields.setdefault(key >> 3, []).append(value)
    return fields


def _ints(fields: dict[int, list], number: int) -> list[int]:
    """A repeated integer field, packed or not."""
    out = []
    for value in fields.get(number, []):
        if isinstance(value, int):
            out.append(value)
        else:
            i = 0
            while i < len(value):
                item, i = _varint(value, i)
                out.append(item)
    return out


def _string(fields: dict[int, list], number: int) -> str:
    return fields[number][0].decode() if number in fields else ""


def _shape_bytes(shape: bytes) -> int:
    fields = _message(shape)
    if 4 in fields:
        return sum(_shape_bytes(sub) for sub in fields[4])
    element = fields.get(2, [0])[0]
    return int(np.prod(_ints(fields, 3), dtype=np.int64)) * _ELEMENT_BYTES[element]


def _groups(instruction: dict[int, list]) -> tuple[tuple[int, ...], ...]:
    if 49 in instruction:
        return tuple(tuple(_ints(_message(group), 1)) for group in instruction[49])
    if 87 in instruction:
        devices = _message(instruction[87][0])
        if 1 in devices:
            return tuple(tuple(_ints(_message(group), 1)) for group in devices[1])
        if 2 in devices:
            iota = _message(devices[2][0])
            groups, per_group = iota[1][0], iota[2][0]
            dims = _ints(iota, 3)
            ids = np.arange(groups * per_group).reshape(dims)
            if _ints(iota, 4):
                ids = np.transpose(ids, _ints(iota, 4))
            return tuple(tuple(int(d) for d in row) for row in ids.reshape(groups, per_group))
    return ()


def _source(instruction: dict[int, list]) -> tuple[str, int, str]:
    if 7 not in instruction:
        return ("", 0, "")
    metadata = _message(instruction[7][0])
    return (_string(metadata, 3), metadata.get(4, [0])[0], _string(metadata, 1))


def collectives(proto: bytes) -> list[dict]:
    """Each collective of the module run: kind, bytes, groups, channel id, executions, source."""
    top = _message(proto)
    module = _message(top[1][0]) if 2 not in top else top
    computations = {}
    for raw in module[3]:
        computation = _message(raw)
        computations[computation[5][0]] = [_message(i) for i in computation.get(2, [])]
    entry = module[6][0]
    found: list[dict] = []

    def record(kind: str, instruction: dict, result_shape: bytes, operand_shapes: list[bytes], executions):
        whole = sum(_shape_bytes(s) for s in operand_shapes) if kind == "reduce-scatter" else _shape_bytes(result_shape)
        found.append({
            "kind": kind,
            "bytes": whole,
            "groups": _groups(instruction),
            "channel_id": instruction.get(26, [0])[0] or None,
            "executions": executions,
            "source": _source(instruction),
        })

    def walk(computation_id: int, executions) -> None:
        instructions = computations[computation_id]
        by_id = {i[35][0]: i for i in instructions}
        for instruction in instructions:
            opcode = _string(instruction, 2)
            operands = [by_id[o][3][0] for o in _ints(instruction, 36) if o in by_id]
            called = _ints(instruction, 38)
            if opcode in _KINDS:
                record(opcode, instruction, instruction[3][0], operands, executions)
            elif opcode.endswith("-start") and opcode[:-6] in _KINDS:
                done = next(i for i in instructions if _ints(i, 36)[:1] == [instruction[35][0]] and _string(i, 2).endswith("-done"))
                record(opcode[:-6], instruction, done[3][0], operands, executions)
            elif opcode == "async-start":
                for inner in computations[called[0]]:
                    if _string(inner, 2) in _KINDS:
                        record(_string(inner, 2), inner, inner[3][0], operands, executions)
            elif opcode == "while":
                config = json.loads(instruction[43][0] or b"{}") if 43 in instruction else {}
                trip = config.get("known_trip_count", {}).get("n")
                walk(called[0], None if executions is None or trip is None else executions * int(trip))
            elif not opcode.endswith("-done"):
                for callee in called:
                    walk(callee, executions)

    walk(entry, 1)
    return found
