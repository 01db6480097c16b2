"""The TPU compile worker: the process that holds libtpu's compile-only client.

``TpuCompiler`` starts it as ``python <this file>``. Run by path, it imports the standard
library, JAX and xlabridge._upstream.jax only (not torch), so libtpu never shares a process with
torch_xla's PJRT client, and a C++ check failure inside libtpu kills this process, not the
user's. Requests and replies are pickled dicts, each framed by an 8-byte length, on stdin and
on a duplicate of the original stdout; fd 1 itself is pointed at stderr, so nothing libtpu or
JAX prints can corrupt a reply. The client imports this module for the framing only.

Before compiling, the worker writes the graph's text to the path the client names, so a graph
that XLA refuses, or that kills the worker, is on disk; after a compile that returns, it
removes the file unless asked to keep it.

An HLO module proto is compiled as the StableHLO ``hlo_to_stablehlo`` makes of it, with the
module's buffer donors (torch_xla's donation of what a step replaces) carried over as
``jax.buffer_donor`` arguments, which the conversion would otherwise drop.
"""

from __future__ import annotations

import importlib
import os
import pickle
import struct
import sys
import time
import traceback
from typing import Any, BinaryIO

_HEADER = struct.Struct(">Q")

# Replies' "status".
OK = "ok"
OUT_OF_MEMORY = "out-of-memory"
REFUSED = "refused"
UNKNOWN_TOPOLOGY = "unknown-topology"
BAD_REQUEST = "bad-request"

# XLA:TPU's out-of-HBM refusal: libtpu 0.0.23's words, and libtpu 0.0.52's error code
# ("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, ...").
_OOM_MARKERS = ("Ran out of memory in memory space hbm", "CompileTimeHbmOom")


def encode(message: dict[str, Any]) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def header_size() -> int:
    return _HEADER.size


def payload_size(header: bytes) -> int:
    return _HEADER.unpack(header)[0]


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Worker:
    def __init__(self) -> None:
        import jax
        from importlib.metadata import version
        from jax.experimental import topologies

        from xlabridge._upstream import jax as upstream_jax

        self._jax = jax
        self._upstream = upstream_jax
        self._topologies_module = topologies
        self._topologies: dict[str, Any] = {}
        self.versions = {"libtpu": version("libtpu"), "jax": jax.__version__}

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "topology":
            return self._describe(request["topology"])
        if op == "compile":
            return self._compile_request(request)
        if op == "compile-jax":
            return self._compile_jax(request)
        return {"status": BAD_REQUEST, "message": f"unknown request {op!r}"}

    # -- topologies

    def _devices(self, name: str) -> list[Any]:
        if name not in self._topologies:
            description = self._topologies_module.get_topology_desc(topology_name=name, platform="tpu")
            self._topologies[name] = list(description.devices)
        return self._topologies[name]

    def _describe(self, name: str) -> dict[str, Any]:
        try:
            devices = self._devices(name)
        except Exception as error:  # libtpu's XlaRuntimeError: INVALID_ARGUMENT with its reason
            return {"status": UNKNOWN_TOPOLOGY, "message": str(error)}
        return {
            "status": OK,
            "device_kind": devices[0].device_kind,
            "devices": [(d.id, tuple(d.coords), d.core_on_chip) for d in devices],
        }

    # -- compiling

    def _compile_request(self, request: dict[str, Any]) -> dict[str, Any]:
        module, fmt = request["module"], request["format"]
        if fmt == "hlo-proto":
            try:
                text = self._upstream.hlo_module_text(module)
                stablehlo = self._upstream.hlo_to_stablehlo(module)
            except Exception as error:
                return {"status": BAD_REQUEST, "message": f"not an HLO module proto: {error}"}
            # hlo_to_stablehlo keeps input_output_alias (a module attribute) but drops the
            # buffer donors torch_xla marks (a step donates what it replaces through them): put
            # them back as JAX marks a donation, so that XLA:TPU pairs them with outputs as it
            # does when torch_xla compiles the graph on a TPU.
            try:
                donors = _buffer_donors(module)
                module = _mark_donors(stablehlo, donors) if donors else stablehlo
            except ValueError as error:
                return {"status": BAD_REQUEST, "message": str(error)}
            # torch_xla's SPMD graphs carry GSPMD shardings (HloSharding), which Shardy ignores.
            shardy = False
            # Their outputs carry no sharding: torch_xla lets XLA propagate one to them when it
            # compiles a sharded graph, so outputs stay sharded; without it each sharded output
            # is all-gathered to a replicated one (the sharded example: 10 all-gathers instead of 0).
            request = {**request, "propagate_to_output": request["num_partitions"] > 1}
        else:
            text = module.decode(errors="replace") if isinstance(module, bytes) else module
            module = module.encode() if isinstance(module, str) else module
            shardy = b"sdy." in module
        return self._compile(module, text, shardy, request)

    def _compile_jax(self, request: dict[str, Any]) -> dict[str, Any]:
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

        jax = self._jax
        description = self._describe(request["topology"])
        if description["status"] != OK:
            return description
        devices = self._devices(request["topology"])
        mesh_axes = request["mesh"]
        count = int(np.prod([size for _, size in mesh_axes])) if mesh_axes else 1
        if count > len(devices):
            return self._too_many(count, request["topology"], len(devices))
        try:
            fn = _load_function(request["fn"])
        except Exception as error:
            return {"status": BAD_REQUEST, "message": f"the TPU worker could not import fn: {error!r}"}
        if mesh_axes:
            mesh = Mesh(
                np.array(devices[:count]).reshape([size for _, size in mesh_axes]),
                tuple(name for name, _ in mesh_axes),
            )
            specs = request["in_specs"] or [None] * len(request["args"])
            shardings = [NamedSharding(mesh, PartitionSpec(*(spec or ()))) for spec in specs]
        else:
            shardings = [SingleDeviceSharding(devices[0])] * len(request["args"])
        args = [
            jax.ShapeDtypeStruct(tuple(shape), jax.numpy.dtype(dtype), sharding=sharding)
            for (shape, dtype), sharding in zip(request["args"], shardings)
        ]
        try:
            lowered = jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",))
        except Exception:
            return {"status": BAD_REQUEST, "message": "lowering fn for TPU failed:\n" + traceback.format_exc(limit=8)}
        text = lowered.as_text()
        return self._compile(text.encode(), text, bool(jax.config.jax_use_shardy_partitioner), {**request, "num_partitions": count})

    def _too_many(self, count: int, topology: str, available: int) -> dict[str, Any]:
        return {
            "status": BAD_REQUEST,
            "message": f"num_partitions={count} but topology {topology} has {available} devices",
        }

    def _compile(self, module: bytes, text: str, shardy: bool, request: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        upstream_jax = self._upstream
        description = self._describe(request["topology"])
        if description["status"] != OK:
            return description
        devices = self._devices(request["topology"])
        count = request["num_partitions"]
        if count > len(devices):
            return self._too_many(count, request["topology"], len(devices))
        graph_path = request["graph_path"]
        with open(graph_path, "w") as f:
            f.write(text)
        options = upstream_jax.empty_compile_options()
        build = options.executable_build_options
        build.num_replicas = 1
        build.num_partitions = count
        build.use_shardy_partitioner = shardy
        if count > 1:
            build.use_spmd_partitioning = True
            build.device_assignment = upstream_jax.device_assignment(np.arange(count).reshape(1, count))
        if request.get("propagate_to_output"):
            build.allow_spmd_sharding_propagation_to_output = [True]
        started = time.perf_counter()
        try:
            executable = _compile_module(devices[0].client, module, upstream_jax.device_list(devices[:count]), options)
        except Exception as error:
            seconds = time.perf_counter() - started
            message = str(error)
            if any(marker in message for marker in _OOM_MARKERS):
                self._discard(graph_path, request)
                return {
                    **description,
                    "status": OUT_OF_MEMORY,
                    "num_partitions": count,
                    "message": message,
                    "compile_seconds": seconds,
                }
            return {"status": REFUSED, "message": message}
        seconds = time.perf_counter() - started
        self._discard(graph_path, request)
        stats = executable.get_compiled_memory_stats()
        cost = executable.cost_analysis()
        if isinstance(cost, list):  # one dict per program on some jaxlib releases
            cost = cost[0] if cost else {}
        return {
            **description,
            "status": OK,
            "num_partitions": count,
            "compile_seconds": seconds,
            "hlo": executable.hlo_modules()[0].to_string(),
            "memory": {
                "argument_bytes": stats.argument_size_in_bytes,
                "output_bytes": stats.output_size_in_bytes,
                "alias_bytes": stats.alias_size_in_bytes,
                "temp_bytes": stats.temp_size_in_bytes,
                "generated_code_bytes": stats.generated_code_size_in_bytes,
            },
            "cost": {key: cost.get(key) for key in ("flops", "transcendentals", "bytes accessed", "optimal_seconds")},
        }

    @staticmethod
    def _discard(graph_path: str, request: dict[str, Any]) -> None:
        if not request.get("keep_graph"):
            os.remove(graph_path)


# HloModuleProto.{host_program_shape, buffer_donor}; ProgramShapeProto.parameters;
# ShapeProto.{element_type, tuple_shapes}; HloBufferDonorProto.entries;
# BufferDonorEntryProto.{parameter_number, parameter_shape_index} (xla/service/hlo.proto,
# xla/xla_data.proto). PrimitiveType TUPLE is 13. jaxlib exposes none of them, so they are decoded
# from the wire format, as xlabridge.pod._hlo_proto does (the worker imports no xlabridge module
# but its JAX wrappers).
_MODULE_PROGRAM_SHAPE, _MODULE_BUFFER_DONOR = 4, 18
_PROGRAM_PARAMETERS = 1
_SHAPE_ELEMENT_TYPE, _SHAPE_TUPLE_SHAPES = 2, 4
_DONOR_ENTRIES = 1
_ENTRY_PARAMETER, _ENTRY_SHAPE_INDEX = 1, 2
_TUPLE = 13


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one protobuf message: ints for varints, bytes for the
    length-delimited fields (fixed-width ones are skipped: none is read here)."""
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
            position += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
    return fields


def _values(fields: list[tuple[int, int | bytes]], number: int) -> list[Any]:
    return [value for field, value in fields if field == number]


def _integers(fields: list[tuple[int, int | bytes]], number: int) -> list[int]:
    """A repeated int64 field, packed (bytes) or not (one varint per entry)."""
    out: list[int] = []
    for value in _values(fields, number):
        if isinstance(value, int):
            out.append(value)
            continue
        position = 0
        while position < len(value):
            item, position = _varint(value, position)
            out.append(item)
    return out


def _leaves(shape: bytes) -> list[tuple[int, ...]]:
    """The shape indices of a ShapeProto's array leaves, in order (an array: ``[()]``)."""
    fields = _fields(shape)
    if (_values(fields, _SHAPE_ELEMENT_TYPE) or [0])[0] != _TUPLE:
        return [()]
    return [(i, *index) for i, element in enumerate(_values(fields, _SHAPE_TUPLE_SHAPES)) for index in _leaves(element)]


def _buffer_donors(proto: bytes) -> list[int]:
    """The entry arguments the module's buffer donors name, as ``hlo_to_stablehlo`` numbers them.

    ``hlo_to_stablehlo`` flattens tuple parameters into one argument per array (torch_xla wraps
    its parameters in one tuple past 3200 of them, and its donors are then ``(0, {i})``), so a
    donor ``(parameter, index)`` is the position of that leaf among all parameters' leaves.
    """
    module = _fields(proto)
    donors = [_fields(entry) for record in _values(module, _MODULE_BUFFER_DONOR)
              for entry in _values(_fields(record), _DONOR_ENTRIES)]
    if not donors:
        return []
    shapes = _values(module, _MODULE_PROGRAM_SHAPE)
    parameters = _values(_fields(shapes[0]), _PROGRAM_PARAMETERS) if shapes else []
    if not parameters:
        raise ValueError("the module marks buffer donors but carries no program shape to place them")
    arguments = {(number, leaf): position for position, (number, leaf) in enumerate(
        (number, leaf) for number, shape in enumerate(parameters) for leaf in _leaves(shape))}
    positions = []
    for entry in donors:
        key = ((_values(entry, _ENTRY_PARAMETER) or [0])[0], tuple(_integers(entry, _ENTRY_SHAPE_INDEX)))
        if key not in arguments:
            raise ValueError(f"buffer donor (parameter {key[0]}, index {list(key[1])}) names no array of the "
                             f"module's {len(parameters)} parameters")
        positions.append(arguments[key])
    return sorted(set(positions))


def _mark_donors(module: bytes, donors: list[int]) -> bytes:
    """``module`` (StableHLO) with ``jax.buffer_donor`` on those arguments of ``main``: what
    JAX writes for a donated argument, which XLA turns back into the module's buffer donors."""
    from xlabridge._upstream import jax as upstream_jax

    ir = upstream_jax.mlir_ir()
    with upstream_jax.ir_context():
        parsed = ir.Module.parse(module)
        main = next(op for op in parsed.body.operations
                    if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main")
        count = len(main.regions[0].blocks[0].arguments)
        if donors[-1] >= count:
            raise ValueError(f"the module's buffer donors name argument {donors[-1]} of main, which has {count}")
        old = list(main.attributes["arg_attrs"]) if "arg_attrs" in main.attributes else [ir.DictAttr.get({})] * count
        attrs = []
        for position, attr in enumerate(old):
            kept = ir.DictAttr(attr)
            entries = {kept[i].name: kept[i].attr for i in range(len(kept))}  # SPMD graphs: mhlo.sharding
            if position in donors:
                entries["jax.buffer_donor"] = ir.BoolAttr.get(True)
            attrs.append(ir.DictAttr.get(entries))
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
        return upstream_jax.module_to_bytecode(parsed)


def _compile_module(client: Any, module: bytes, devices: Any, options: Any) -> Any:
    """``client.compile`` of a StableHLO module given as bytes (text or bytecode).

    jaxlib up to 0.7 takes the bytes; jaxlib 0.10 (the TorchTPU environment's, with libtpu
    0.0.52) takes only a parsed MLIR module and refuses bytes with a TypeError
    ("incompatible function arguments"), so the module is parsed in JAX's MLIR context then.
    """
    try:
        return client.compile(module, devices, options)
    except TypeError:
        from xlabridge._upstream import jax as upstream_jax

        with upstream_jax.ir_context():
            return client.compile(upstream_jax.mlir_ir().Module.parse(module), devices, options)


def _load_function(reference: bytes | str) -> Any:
    """``fn`` as pickled by reference in the client, or a ``"module:qualified.name"`` string."""
    if isinstance(reference, bytes):
        return pickle.loads(reference)
    module_name, _, qualname = reference.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    try:
        worker = _Worker()
    except Exception:
        replies.write(encode({"status": BAD_REQUEST, "message": traceback.format_exc(limit=4)}))
        replies.flush()
        return
    replies.write(encode({"status": OK, **worker.versions}))
    replies.flush()
    while True:
        header = _read_exactly(requests, _HEADER.size)
        if header is None:
            return
        request = pickle.loads(_read_exactly(requests, payload_size(header)) or b"")
        if request["op"] == "exit":
            return
        replies.write(encode(worker.handle(request)))
        replies.flush()


if __name__ == "__main__":
    # Run by path, Python puts this file's directory first on sys.path; its sibling modules
    # (topology.py, result.py...) must not shadow top-level modules of the same name.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    main()
