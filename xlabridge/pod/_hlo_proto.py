"""The Python stack of each HLO instruction, read from a serialized HLO module proto.

torch_xla with ``XLA_HLO_DEBUG=1`` records, for every instruction, the whole Python stack that
created it: the module proto's stack-frame index (``HloModuleProto.stack_frame_index``) holds
the frames and each instruction's ``OpMetadata.stack_frame_id`` points at its innermost one.
XLA's text printer drops the index and keeps only ``source_file``/``source_line`` of the
innermost frame, which for torch_xla is usually inside torch (``torch/nn/modules/linear.py``),
so the user's line needs the proto. XLA keeps both through optimization and SPMD
partitioning, so an ``--xla_dump_hlo_as_proto`` file of the partitioned module carries them.

No protobuf library is needed (jaxlib exposes no per-instruction fields and ``protobuf`` is not
a dependency): the few fields read are decoded from the wire format directly. Field numbers are
those of ``xla/service/hlo.proto`` and ``xla/xla_data.proto`` (stable: protobuf field numbers
are never reused).
"""

from __future__ import annotations

from xlabridge.diagnostics.events import Frame

__all__ = ["instruction_stacks", "module_proto"]

# HloProto.hlo_module; HloModuleProto.{computations, stack_frame_index};
# HloComputationProto.instructions; HloInstructionProto.{name, metadata}; OpMetadata.stack_frame_id;
# StackFrameIndexProto.{file_names, function_names, file_locations, stack_frames};
# FileLocation.{file_name_id, function_name_id, line}; StackFrame.{file_location_id, parent_frame_id}.
_HLO_PROTO_MODULE = 1
_MODULE_ENTRY_NAME, _MODULE_COMPUTATIONS, _MODULE_STACK_INDEX = 2, 3, 17
_COMPUTATION_INSTRUCTIONS = 2
_INSTRUCTION_NAME, _INSTRUCTION_METADATA = 1, 7
_METADATA_STACK_FRAME_ID = 15
_INDEX_FILES, _INDEX_FUNCTIONS, _INDEX_LOCATIONS, _INDEX_FRAMES = 1, 2, 3, 4


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, position


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one message: ints for varints, bytes for the rest."""
    fields: list[tuple[int, int | bytes]] = []
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _varint(data, position)
            fields.append((number, value))
        elif wire_type == 2:
            length, position = _varint(data, position)
            fields.append((number, data[position : position + length]))
            position += length
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
            fields.append((number, data[position : position + size]))
            position += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}: not an HLO module proto")
    return fields


def _all(fields: list[tuple[int, int | bytes]], number: int) -> list:
    return [value for field, value in fields if field == number]


def _first(fields: list[tuple[int, int | bytes]], number: int, default=0):
    values = _all(fields, number)
    return values[0] if values else default


def _module_fields(proto: bytes) -> list[tuple[int, int | bytes]]:
    """The HloModuleProto's fields, from either an HloModuleProto or an HloProto wrapping one.

    An HloModuleProto names its entry computation (field 2); an HloProto has no field 2 (it is
    reserved there) and holds the module in field 1.
    """
    fields = _fields(proto)
    if not _all(fields, _MODULE_ENTRY_NAME):
        wrapped = _all(fields, _HLO_PROTO_MODULE)
        if wrapped and isinstance(wrapped[0], bytes):
            fields = _fields(wrapped[0])
    return fields


def module_proto(proto: bytes) -> bytes:
    """The serialized ``HloModuleProto`` of ``proto``: itself, or the module an ``HloProto`` wraps
    (XLA's ``*.hlo.pb`` dump files are ``HloProto``; compilers take the module)."""
    fields = _fields(proto)
    if _all(fields, _MODULE_ENTRY_NAME):
        return proto
    wrapped = _all(fields, _HLO_PROTO_MODULE)
    if not wrapped or not isinstance(wrapped[0], bytes):
        raise ValueError("not an HLO module proto: neither an HloModuleProto nor an HloProto holding one")
    return wrapped[0]


def instruction_stacks(proto: bytes) -> dict[str, tuple[Frame, ...]]:
    """Each instruction's Python stack (outermost frame first), by instruction name.

    ``proto`` is a serialized ``HloModuleProto`` (``_get_xla_tensors_hlo_proto``) or ``HloProto``
    (the ``*.hlo.pb`` files of ``--xla_dump_hlo_as_proto``). Instructions without a recorded
    stack are left out; a module without a stack-frame index gives an empty mapping.
    """
    module = _module_fields(proto)
    index = _first(module, _MODULE_STACK_INDEX, b"")
    if not index:
        return {}
    index_fields = _fields(index)
    files = [value.decode() for value in _all(index_fields, _INDEX_FILES)]
    functions = [value.decode() for value in _all(index_fields, _INDEX_FUNCTIONS)]
    locations = [_fields(value) for value in _all(index_fields, _INDEX_LOCATIONS)]
    frames = [_fields(value) for value in _all(index_fields, _INDEX_FRAMES)]

    def frame(frame_id: int) -> Frame:
        location = locations[_first(frames[frame_id - 1], 1) - 1]
        return Frame(
            filename=files[_first(location, 1) - 1],
            lineno=_first(location, 3),
            function=functions[_first(location, 2) - 1] if _first(location, 2) else "",
        )

    def stack(frame_id: int) -> tuple[Frame, ...]:
        chain = []
        while frame_id:
            chain.append(frame(frame_id))
            frame_id = _first(frames[frame_id - 1], 2)
        return tuple(reversed(chain))

    stacks: dict[str, tuple[Frame, ...]] = {}
    cache: dict[int, tuple[Frame, ...]] = {}
    for computation in _all(module, _MODULE_COMPUTATIONS):
        for instruction in _all(_fields(computation), _COMPUTATION_INSTRUCTIONS):
            fields = _fields(instruction)
            metadata = _first(fields, _INSTRUCTION_METADATA, b"")
            frame_id = _first(_fields(metadata), _METADATA_STACK_FRAME_ID) if metadata else 0
            if frame_id:
                if frame_id not in cache:
                    cache[frame_id] = stack(frame_id)
                stacks[_first(fields, _INSTRUCTION_NAME, b"").decode()] = cache[frame_id]
    return stacks
