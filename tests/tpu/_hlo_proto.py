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


# ShapeProto, LayoutProto, TileProto, OpMetadata and PrecisionConfig field numbers (xla/xla_data.proto),
# and HloInstructionProto's shape, metadata, id, operand ids and precision config (xla/service/hlo.proto).
_INSTRUCTION_SHAPE, _INSTRUCTION_METADATA, _INSTRUCTION_ID, _OPERAND_IDS, _PRECISION_CONFIG = 3, 7, 35, 36, 51
_SHAPE_ELEMENT_TYPE, _SHAPE_DIMENSIONS, _SHAPE_TUPLE_SHAPES, _SHAPE_LAYOUT = 2, 3, 4, 5
_LAYOUT_MINOR_TO_MAJOR, _LAYOUT_TILES, _LAYOUT_MEMORY_SPACE = 1, 6, 8
_TILE_DIMENSIONS = 1
_METADATA_OP_NAME, _METADATA_SOURCE_FILE, _METADATA_SOURCE_LINE = 2, 3, 4
_PRECISION_OPERANDS = 1
PRECISIONS = {0: "default", 1: "high", 2: "highest"}
"""PrecisionConfig.Precision."""
ELEMENT_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 2, 8: 4, 9: 8, 10: 2, 11: 4, 12: 8, 15: 8, 16: 2, 18: 16}
"""Bytes per element of each PrimitiveType (PRED, S8 ... F32, F64, C64, BF16, C128)."""
F32, F64, TUPLE = 11, 12, 13


def _ints(wire: int, value) -> list[int]:
    if wire != 2:
        return [value]
    out, i = [], 0
    while i < len(value):
        item, i = _varint(value, i)
        out.append(item)
    return out


def shape(data: bytes) -> dict:
    """A ShapeProto: ``element_type``, ``dims``, ``minor_to_major``, ``tiles`` (each a tuple), ``memory_space``,
    and ``tuple`` (its element shapes, for a tuple)."""
    out = {"element_type": 0, "dims": [], "minor_to_major": [], "tiles": [], "memory_space": 0, "tuple": []}
    for number, wire, value in _fields(data):
        if number == _SHAPE_ELEMENT_TYPE:
            out["element_type"] = value
        elif number == _SHAPE_DIMENSIONS:
            out["dims"] += _ints(wire, value)
        elif number == _SHAPE_TUPLE_SHAPES:
            out["tuple"].append(shape(value))
        elif number == _SHAPE_LAYOUT:
            for field, kind, item in _fields(value):
                if field == _LAYOUT_MINOR_TO_MAJOR:
                    out["minor_to_major"] += _ints(kind, item)
                elif field == _LAYOUT_TILES:
                    out["tiles"].append(tuple(d for f, k, v in _fields(item) if f == _TILE_DIMENSIONS
                                              for d in _ints(k, v)))
                elif field == _LAYOUT_MEMORY_SPACE:
                    out["memory_space"] = item
    return out


def instructions(module_proto: bytes) -> dict[str, list[dict]]:
    """Every computation's instructions, by computation name (the entry's under ``"ENTRY"`` too): ``name``,
    ``opcode``, ``shape`` (``shape``), ``operands`` (names), ``target``, ``precision`` (a name per operand),
    ``op_name``, ``source_file``, ``source_line``."""
    computations: dict[str, list[dict]] = {}
    entry_id, entry_name = None, None
    ids: dict[int, str] = {}
    for number, _, value in _fields(module_proto):
        if number == _MODULE_ENTRY_ID:
            entry_id = value
    for number, _, value in _fields(module_proto):
        if number != _MODULE_COMPUTATIONS:
            continue
        name, ident, found = "", None, []
        for field, _, item in _fields(value):
            if field == 1:
                name = item.decode()
            elif field == _COMPUTATION_ID:
                ident = item
            elif field == _COMPUTATION_INSTRUCTIONS:
                row = _instruction(item) | {"shape": {}, "operand_ids": [], "precision": [], "op_name": "",
                                            "source_file": "", "source_line": 0, "id": None}
                for f, kind, v in _fields(item):
                    if f == _INSTRUCTION_SHAPE:
                        row["shape"] = shape(v)
                    elif f == _INSTRUCTION_ID:
                        row["id"] = v
                    elif f == _OPERAND_IDS:
                        row["operand_ids"] += _ints(kind, v)
                    elif f == _PRECISION_CONFIG:
                        row["precision"] = [PRECISIONS.get(p, str(p)) for g, k, pv in _fields(v)
                                            if g == _PRECISION_OPERANDS for p in _ints(k, pv)]
                    elif f == _INSTRUCTION_METADATA:
                        for g, _, mv in _fields(v):
                            if g == _METADATA_OP_NAME:
                                row["op_name"] = mv.decode()
                            elif g == _METADATA_SOURCE_FILE:
                                row["source_file"] = mv.decode()
                            elif g == _METADATA_SOURCE_LINE:
                                row["source_line"] = mv
                found.append(row)
        for row in found:
            ids[row["id"]] = row["name"]
        computations[name] = found
        if ident == entry_id:
            entry_name = name
    for rows in computations.values():
        for row in rows:
            row["operands"] = [ids.get(i, "") for i in row["operand_ids"]]
    computations["ENTRY"] = computations[entry_name]
    return computations


def padded_dims(array: dict) -> list[int]:
    """An array shape's dimensions as its first tile pads them."""
    dims = list(array["dims"])
    if array["tiles"]:
        for extent, dim in zip(reversed(array["tiles"][0]), array["minor_to_major"]):
            dims[dim] = -(-dims[dim] // extent) * extent
    return dims


def layout_copies(entry: list[dict]) -> list[int]:
    """The bytes of each layout copy and transpose in an entry computation's rows: a transpose, or a
    copy whose result's layout (minor-to-major order, first tile) differs from its operand's."""
    import math

    names = {row["name"]: row for row in entry}
    copies = []
    for row in entry:
        if row["opcode"] not in ("copy", "transpose", "copy-start"):
            continue
        out = row["shape"]["tuple"][0] if row["shape"]["tuple"] else row["shape"]
        source = names[row["operands"][0]]["shape"]
        if row["opcode"] == "transpose" or (out["minor_to_major"], out["tiles"][:1]) != (
                source["minor_to_major"], source["tiles"][:1]):
            copies.append(math.prod(padded_dims(out)) * ELEMENT_BYTES[out["element_type"]])
    return copies
