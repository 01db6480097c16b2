"""What to fix for the TPU, read from one compiled TPU program: the optimized HLO libtpu made.

Nothing here runs on a TPU or guesses: each finding is read from the compiled program's text.

* **Padding.** XLA:TPU stores arrays in tiles (``T(8,128)``: 8 sublanes by 128 lanes over the two
  physical minor dimensions, ``T(256)`` for one dimension), written in each array's layout. A
  dimension that is not a multiple of its tile extent is padded in every array and every matmul it
  is part of: the bytes of that padding over the program's arrays, the MXU work of it over its
  matmuls (their flops on the padded extents, read from the operands' and results' tiles), and the
  nearest sizes that would not pad.
* **Precision.** A float32 matmul or convolution (``dot``, ``convolution``) runs on the MXU in
  bf16 passes: one at the default precision (its inputs are rounded to bf16: precision is lost
  silently while every f32 byte is still read), three at ``HIGH``, six at ``HIGHEST``
  (``operand_precision`` in the program). Autocast to bf16 is the usual fix.
* **Copies.** Copies that change an array's layout and transposes XLA:TPU runs as kernels of their
  own between fusions, with their bytes (a copy that only moves an array into another memory
  space, a prefetch, is not one).
* **HBM.** For a program near or over one device's HBM, its largest arrays.
* **Uncosted.** Custom calls of the program's entry that XLA's cost model cannot cost (it counts
  each as -1 s, -1 flop and -1 byte: ``X64SplitLow`` and friends, which emulate 64-bit integers
  that TPUs do not have) and host transfers. The cost of the rest is the cost model's figure with
  those -1s taken back out.

Each finding's ``cost_model_seconds`` is the cost model's seconds for its program apportioned to
it: the program's seconds times the larger of the finding's shares of the program's flops and of
its bytes accessed (a finding with no flops or bytes of its own in the program has none). They
rank findings; they are not times measured on a TPU. Each finding is placed at a source line
through the HLO metadata of its instructions (``source_file``/``source_line``, the line that
traced the op, and ``op_name``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from xlabridge.tpu._kernels import _computations
from xlabridge.tpu._result import TpuCompileResult, TpuFinding, TpuFindingKind

__all__ = ["Array", "findings", "read_findings", "uncosted_custom_calls"]

MIN_PADDING_SHARE = 0.01
"""A dimension smaller than its tile is a finding when its padding is at least this share of the
program's array bytes or of its matmuls' MXU work (below it: scalars and small vectors); a
dimension of a tile or more that is not a multiple of it always is (a vocabulary of 50257)."""
NEAR_HBM = 0.8
"""A program whose HBM per device reaches this share of the device's gets its largest arrays listed."""
LARGEST_ARRAYS = 5
"""Arrays an HBM finding names."""
COSTED_CUSTOM_CALLS = frozenset({"tpu_custom_call"})
"""Custom calls the cost model does not count as -1: Mosaic kernels add nothing to it."""
HOST_TRANSFER_OPCODES = frozenset({"send", "recv", "infeed", "outfeed", "send-done", "recv-done"})
HOST_TRANSFER_TARGETS = frozenset({"MoveToHost", "MoveToDevice"})
HOST_MEMORY_SPACE = 5
"""XLA's memory space of host memory (``S(5)`` in a layout)."""
_PASSES = {"default": 1, "high": 3, "highest": 6}
"""bf16 passes of an f32 matmul on the MXU at each ``operand_precision``."""

_ITEM_BITS = {
    "pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "f8e4m3fn": 8, "f8e5m2": 8, "f8e4m3b11fnuz": 8,
    "f8e4m3fnuz": 8, "f8e5m2fnuz": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32, "u32": 32,
    "f32": 32, "s64": 64, "u64": 64, "f64": 64, "c64": 64, "c128": 128,
}
_ARRAY = re.compile(r"(?P<type>[a-z]\w*)\[(?P<dims>[\d,]*)\](?:\{(?P<m2m>[\d,]*)(?::(?P<attrs>[^}]*))?\})?")
_TILE = re.compile(r"T\((?P<tile>[\d,]+)\)")
_SPACE = re.compile(r"S\((?P<space>\d+)\)")
_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>\([^=]*?\)|\S+)\s+(?P<opcode>[\w\-]+)\((?P<operands>[^)]*)\)(?P<rest>.*)$")
_OPERAND = re.compile(r"%?([\w.\-]+)")
_METADATA = re.compile(r"metadata=\{(?P<body>[^}]*)\}")
_META_FIELD = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|(\d+))')
_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]+)"')
_PRECISION = re.compile(r"operand_precision=\{(?P<p>[^}]*)\}")
_DIM_LABELS = re.compile(r"dim_labels=(?P<lhs>\w+)_(?P<rhs>\w+)->(?P<out>\w+)")
_WINDOW = re.compile(r"window=\{size=(?P<size>[\dx]+)")
_CONTRACTING = re.compile(r"lhs_contracting_dims=\{(?P<dims>[\d,]*)\}")


@dataclasses.dataclass(frozen=True)
class Array:
    """An array of the compiled program as XLA:TPU lays it out: its shape, element type and tiles."""

    dtype: str
    dims: tuple[int, ...]
    minor_to_major: tuple[int, ...]
    tile: tuple[int, ...]
    """The first (outermost) tile of the layout, over the physical minor dimensions; () untiled."""
    memory_space: int = 0

    @property
    def item_bits(self) -> int:
        return _ITEM_BITS.get(self.dtype, 0)

    def padded_dims(self) -> tuple[int, ...]:
        """Each dimension's extent with the tile's padding (the tile's last extent pads the minor
        dimension, the one before it the second-minor, and so on)."""
        padded = list(self.dims)
        for extent, dim in zip(reversed(self.tile), self.minor_to_major):
            padded[dim] = -(-padded[dim] // extent) * extent
        return tuple(padded)

    @property
    def bytes(self) -> int:
        return math.prod(self.dims) * self.item_bits // 8

    @property
    def padded_bytes(self) -> int:
        return math.prod(self.padded_dims()) * self.item_bits // 8


@dataclasses.dataclass(frozen=True)
class _Instruction:
    name: str
    opcode: str
    arrays: tuple[Array, ...]
    """Its result's arrays (one, or a tuple's)."""
    operands: tuple[str, ...]
    rest: str
    op_name: str
    source_file: str
    source_line: int
    computation: str


def parse_array(text: str) -> Array | None:
    """The ``Array`` of one HLO array shape (``f32[8,1000]{1,0:T(8,128)}``), None for a token."""
    match = _ARRAY.fullmatch(text.strip())
    if not match or match.group("type") not in _ITEM_BITS:
        return None
    dims = tuple(int(d) for d in match.group("dims").split(",") if d)
    m2m = tuple(int(d) for d in (match.group("m2m") or "").split(",") if d) or tuple(reversed(range(len(dims))))
    attrs = match.group("attrs") or ""
    tile = _TILE.search(attrs)
    space = _SPACE.search(attrs)
    return Array(match.group("type"), dims, m2m, tuple(int(t) for t in tile.group("tile").split(",")) if tile else (),
                 int(space.group("space")) if space else 0)


def _arrays(shape: str) -> tuple[Array, ...]:
    return tuple(a for a in (parse_array(m.group(0)) for m in _ARRAY.finditer(shape)) if a is not None)


def _instructions(hlo_text: str) -> tuple[list[_Instruction], str]:
    bodies, entry = _computations(hlo_text)
    out = []
    for computation, lines in bodies.items():
        for line in lines:
            match = _LINE.match(line)
            if not match:
                continue
            meta = _METADATA.search(match.group("rest"))
            fields = {k: s if s else n for k, s, n in _META_FIELD.findall(meta.group("body"))} if meta else {}
            out.append(_Instruction(
                match.group("name"), match.group("opcode"), _arrays(match.group("shape")),
                tuple(_OPERAND.match(o.strip()).group(1) for o in match.group("operands").split(",") if o.strip()
                      and _OPERAND.match(o.strip())),
                match.group("rest"), fields.get("op_name", ""), fields.get("source_file", ""),
                int(fields.get("source_line") or 0), computation,
            ))
    return out, entry


def uncosted_custom_calls(hlo_text: str) -> list[str]:
    """Targets of the entry's custom calls that XLA's cost model counts as -1 each (one per call)."""
    instructions, entry = _instructions(hlo_text)
    return [target.group("target") for i in instructions if i.computation == entry and i.opcode == "custom-call"
            and (target := _TARGET.search(i.rest)) and target.group("target") not in COSTED_CUSTOM_CALLS]


def _mib(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _flops(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}flop"
    return f"{value:.0f} flop"


class _Reader:
    """One compiled program's findings (see the module docstring)."""

    def __init__(self, hlo_text: str, *, flops: float | None, bytes_accessed: float | None,
                 cost_model_seconds: float | None, hbm_bytes: int | None, capacity_bytes: int | None) -> None:
        self.instructions, self.entry = _instructions(hlo_text)
        self.by_name = {(i.computation, i.name): i for i in self.instructions}
        self.flops, self.bytes_accessed, self.seconds = flops, bytes_accessed, cost_model_seconds
        self.hbm_bytes, self.capacity_bytes = hbm_bytes, capacity_bytes
        self.top = [i for i in self.instructions if i.computation == self.entry]
        # The program's arrays: its entry's parameters and the results of its kernels (a bitcast,
        # tuple or get-tuple-element names an array another instruction made; an asynchronous
        # copy's start holds both ends of a copy its done returns).
        self.buffers = [(i, a) for i in self.top if i.opcode not in _ALIASES for a in i.arrays]

    def cost(self, flops: float, nbytes: float) -> float | None:
        if self.seconds is None:
            return None
        shares = [flops / self.flops if self.flops else 0.0, nbytes / self.bytes_accessed if self.bytes_accessed else 0.0]
        return self.seconds * min(1.0, max(shares)) if max(shares) > 0 else None

    def operand(self, instruction: _Instruction, index: int) -> Array | None:
        if index >= len(instruction.operands):
            return None
        found = self.by_name.get((instruction.computation, instruction.operands[index]))
        return found.arrays[0] if found is not None and len(found.arrays) == 1 else None

    def matmuls(self) -> list[tuple[_Instruction, list[tuple[int, int]], float]]:
        """Each dot and convolution: ``(instruction, [(extent, padded extent)...], flops)`` over its
        result's dimensions, its contracting dimensions and its window."""
        out = []
        for i in self.instructions:
            if i.opcode not in ("dot", "convolution") or len(i.arrays) != 1:
                continue
            result, lhs = i.arrays[0], self.operand(i, 0)
            if lhs is None:
                continue
            extents = list(zip(result.dims, result.padded_dims()))
            lhs_padded = lhs.padded_dims()
            if i.opcode == "dot":
                contracting = _CONTRACTING.search(i.rest)
                dims = [int(d) for d in contracting.group("dims").split(",") if d] if contracting else []
                extents += [(lhs.dims[d], lhs_padded[d]) for d in dims]
            else:
                labels = _DIM_LABELS.search(i.rest)
                if labels is None or "f" not in labels.group("lhs"):
                    continue
                feature = labels.group("lhs").index("f")
                extents.append((lhs.dims[feature], lhs_padded[feature]))
                window = _WINDOW.search(i.rest)
                if window:
                    extents += [(int(s), int(s)) for s in window.group("size").split("x")]
            out.append((i, extents, 2.0 * math.prod(e for e, _ in extents)))
        return out

    # -- the kinds

    def padding(self) -> list[TpuFinding]:
        # per (size, padded size): padding bytes, MXU work, arrays, matmuls, tile, the largest instance
        waste: dict[tuple[int, int], dict[str, Any]] = defaultdict(
            lambda: {"bytes": 0, "work": 0.0, "arrays": 0, "matmuls": 0, "tile": 0, "where": None, "most": -1.0})

        def add(key: tuple[int, int], instruction: _Instruction, amount: float, what: str) -> None:
            entry = waste[key]
            entry["bytes" if what == "arrays" else "work"] += amount
            entry[what] += 1
            if amount > entry["most"]:
                entry["where"], entry["most"] = instruction, amount

        total_bytes = sum(a.padded_bytes for _, a in self.buffers)
        for instruction, array in self.buffers:
            current = list(array.padded_dims())
            # each padded dimension adds the bytes of its padding over the dimensions padded after it
            for extent, dim in zip(reversed(array.tile), array.minor_to_major):
                if current[dim] == array.dims[dim]:
                    continue
                before = list(current)
                before[dim] = array.dims[dim]
                key = (array.dims[dim], current[dim])
                waste[key]["tile"] = extent
                add(key, instruction, (math.prod(current) - math.prod(before)) * array.item_bits // 8, "arrays")
                current = before
        total_work = 0.0
        for instruction, extents, _ in self.matmuls():
            current = [p for _, p in extents]
            total_work += 2.0 * math.prod(current)
            for index, (extent, padded) in enumerate(extents):
                if padded == extent:
                    continue
                before = list(current)
                before[index] = extent
                add((extent, padded), instruction, 2.0 * (math.prod(current) - math.prod(before)), "matmuls")
                current = before
        found = []
        for (size, padded), entry in waste.items():
            nbytes, work, tile, where = entry["bytes"], entry["work"], entry["tile"], entry["where"]
            share = max(nbytes / total_bytes if total_bytes else 0.0, work / total_work if total_work else 0.0)
            if not tile or (share < MIN_PADDING_SHARE and size < tile):
                continue
            smaller = size // tile * tile
            parts = []
            if entry["arrays"]:
                parts.append(f"{_mib(nbytes)} of padding in {entry['arrays']} array(s) "
                             f"({nbytes / total_bytes:.0%} of the program's array bytes)")
            if entry["matmuls"]:
                parts.append(f"{_flops(work)} of MXU work on padding in {entry['matmuls']} matmul(s) "
                             f"({work / total_work:.0%} of their work)")
            found.append(TpuFinding(
                TpuFindingKind.PADDING,
                f"a dimension of {size} pads to {padded} in XLA:TPU's tiles ({tile} along it): {'; '.join(parts)}. "
                f"A size of {padded}" + (f" or {smaller}" if smaller else "") + f", a multiple of {tile}, would not "
                "pad: pad the dimension (a vocabulary, hidden size or batch) to it, or fold a small dimension into "
                "a larger one.",
                self.cost(work, nbytes), bytes=nbytes, flops=work, count=entry["arrays"] + entry["matmuls"],
                instruction=where.name, op_name=where.op_name, source_file=where.source_file, source_line=where.source_line,
                detail={"size": size, "padded": padded, "tile": tile, "smaller": smaller, "larger": padded},
            ))
        return found

    def precision(self) -> list[TpuFinding]:
        groups: dict[str, list] = defaultdict(list)
        for instruction, extents, flops in self.matmuls():
            lhs, rhs = self.operand(instruction, 0), self.operand(instruction, 1)
            # an f32 operand, or an f32 result of operands XLA:TPU already narrowed to bf16
            if not any(a is not None and a.dtype in ("f32", "f64") for a in (lhs, rhs, instruction.arrays[0])):
                continue
            match = _PRECISION.search(instruction.rest)
            levels = [p.strip().lower() for p in match.group("p").split(",")] if match else ["default"]
            level = max(levels, key=lambda p: _PASSES.get(p, 1))
            nbytes = sum(a.bytes for a in (lhs, rhs, instruction.arrays[0]) if a is not None)
            groups[level].append((instruction, flops, nbytes))
        found = []
        for level, members in groups.items():
            flops = sum(f for _, f, _ in members)
            nbytes = sum(b for _, _, b in members)
            where = max(members, key=lambda m: m[1])[0]
            passes = _PASSES.get(level, 1)
            if passes == 1:
                what = ("at the default precision, the MXU rounds their f32 inputs to bf16 (one pass): precision "
                        "is lost silently, while every f32 byte is still read and written")
            else:
                what = (f"at precision {level.upper()}, each runs as {passes} bf16 passes on the MXU "
                        f"({passes}x the work of one bf16 matmul)")
            found.append(TpuFinding(
                TpuFindingKind.PRECISION,
                f"{len(members)} float32 matmul(s)/convolution(s), {_flops(flops)} and {_mib(nbytes)} of operands "
                f"and results: {what}. Run them in bf16 with autocast (`with torch.autocast('xla', "
                "dtype=torch.bfloat16):` around the forward; xlabridge.autocast on XLA): half the bytes, one pass; "
                "keep f32 only where a loss needs it.",
                self.cost(flops, nbytes), bytes=nbytes, flops=flops, count=len(members),
                instruction=where.name, op_name=where.op_name, source_file=where.source_file, source_line=where.source_line,
                detail={"precision": level, "passes": passes},
            ))
        return found

    def copies(self) -> list[TpuFinding]:
        members = []
        for instruction in self.top:
            if instruction.opcode not in ("copy", "transpose", "copy-start") or not instruction.arrays:
                continue
            source, result = self.operand(instruction, 0), instruction.arrays[0]
            if source is None or (instruction.opcode != "transpose" and source.minor_to_major == result.minor_to_major
                                  and source.tile == result.tile):
                continue  # a copy into another memory space (a prefetch), not a relayout
            members.append((instruction, result.padded_bytes))
        if not members:
            return []
        nbytes = sum(b for _, b in members)
        where = max(members, key=lambda m: m[1])[0]
        names = sorted({i.opcode.replace("-start", "") for i, _ in members})
        return [TpuFinding(
            TpuFindingKind.COPY,
            f"XLA:TPU inserted {len(members)} {' and '.join(names)} kernel(s) that change an array's layout between "
            f"fusions, {_mib(nbytes)} written (and as much read). They come from a transpose, permute or view "
            "whose layout the next op does not take as it is (attention's head transposes, `.t()` before a "
            "matmul, `.contiguous()`): fold the permutation into the matmul (einsum, or weights stored in the "
            "layout they are used in) or keep one layout through the block.",
            self.cost(0.0, 2.0 * nbytes), bytes=nbytes, count=len(members),
            instruction=where.name, op_name=where.op_name, source_file=where.source_file, source_line=where.source_line,
            detail={"opcodes": names},
        )]

    def hbm(self) -> list[TpuFinding]:
        if not self.hbm_bytes or not self.capacity_bytes or self.hbm_bytes < NEAR_HBM * self.capacity_bytes:
            return []
        largest = sorted(self.buffers, key=lambda b: -b[1].padded_bytes)[:LARGEST_ARRAYS]
        if not largest:
            return []
        listed = ", ".join(
            f"{a.dtype}[{','.join(map(str, a.dims))}] {_mib(a.padded_bytes)} ({i.op_name or i.name}"
            + (f" at {i.source_file}:{i.source_line}" if i.source_file else "") + ")" for i, a in largest)
        share = self.hbm_bytes / self.capacity_bytes
        where = largest[0][0]
        return [TpuFinding(
            TpuFindingKind.HBM,
            f"the program needs {_mib(self.hbm_bytes)} of one device's {_mib(self.capacity_bytes)} of HBM "
            f"({share:.0%}); its largest arrays: {listed}. Shard them over more chips (SPMD, FSDPv2), lower the "
            "batch or sequence length, recompute activations (gradient checkpointing), or keep them in bf16.",
            None, bytes=sum(a.padded_bytes for _, a in largest), count=len(largest),
            instruction=where.name, op_name=where.op_name, source_file=where.source_file, source_line=where.source_line,
            detail={"hbm_bytes": self.hbm_bytes, "capacity_bytes": self.capacity_bytes,
                    "arrays": [a.padded_bytes for _, a in largest]},
        )]

    def uncosted(self) -> list[TpuFinding]:
        members: dict[str, list[_Instruction]] = defaultdict(list)
        for instruction in self.top:
            target = _TARGET.search(instruction.rest) if instruction.opcode == "custom-call" else None
            if target and target.group("target") in HOST_TRANSFER_TARGETS:
                members["host transfer " + target.group("target")].append(instruction)
            elif target and target.group("target") not in COSTED_CUSTOM_CALLS:
                members[target.group("target")].append(instruction)
            elif instruction.opcode in HOST_TRANSFER_OPCODES or (
                    instruction.opcode in ("copy-start", "copy") and any(
                        a.memory_space == HOST_MEMORY_SPACE for a in instruction.arrays)):
                members["host transfer " + instruction.opcode].append(instruction)
        if not members:
            return []
        everything = [i for group in members.values() for i in group]
        nbytes = sum(a.bytes for i in everything for a in i.arrays)
        listed = ", ".join(f"{len(group)} {what}" for what, group in sorted(members.items()))
        x64 = any(what.startswith("X64") for what in members)
        fix = ("X64Split*/X64Combine emulate 64-bit integers, which TPUs do not have: keep indices, labels and "
               "counters in int32 (`.int()` before they reach the device, `dtype=torch.int32`)." if x64 else
               "Replace them with ops XLA can cost and fuse, or keep them off the step's path.")
        where = max(everything, key=lambda i: 1 if i.source_file else 0)
        rest = ("the cost model's time of the program leaves them out: it counts each as -1 s, so the program's "
                "time is given for the rest" if self.seconds is not None else
                "the cost model has no time for them")
        return [TpuFinding(
            TpuFindingKind.UNCOSTED,
            f"{listed}: {rest}. {fix}",
            None, bytes=nbytes, count=len(everything),
            instruction=where.name, op_name=where.op_name, source_file=where.source_file, source_line=where.source_line,
            detail={"targets": sorted(members)},
        )]


_ALIASES = frozenset({"bitcast", "tuple", "get-tuple-element", "copy-start", "copy-done", "after-all",
                      "opt-barrier", "constant"})


def read_findings(
    hlo_text: str, *, flops: float | None = None, bytes_accessed: float | None = None,
    cost_model_seconds: float | None = None, hbm_bytes: int | None = None, capacity_bytes: int | None = None,
) -> list[TpuFinding]:
    """The findings of an optimized TPU HLO module's text, costliest first (by the cost model's
    seconds given; findings without a cost after, in the order padding, precision, copies, HBM,
    uncosted). The cost model's figures and the HBM figures are the program's (``TpuCompileResult``)."""
    if not hlo_text:
        return []
    reader = _Reader(hlo_text, flops=flops, bytes_accessed=bytes_accessed, cost_model_seconds=cost_model_seconds,
                     hbm_bytes=hbm_bytes, capacity_bytes=capacity_bytes)
    found = [*reader.padding(), *reader.precision(), *reader.copies(), *reader.hbm(), *reader.uncosted()]
    return _ranked(found)


def _ranked(found: Iterable[TpuFinding]) -> list[TpuFinding]:
    found = list(found)
    order = {id(f): n for n, f in enumerate(found)}
    return sorted(found, key=lambda f: (f.cost_model_seconds is None, -(f.cost_model_seconds or 0.0), order[id(f)]))


def findings(result: TpuCompileResult) -> list[TpuFinding]:
    """What to fix for the TPU in one compiled graph, costliest by the cost model first.

    Read from ``result``'s optimized HLO (``TpuCompileResult.hlo``, with its cost and HBM figures):
    padding per dimension, float32 matmuls and convolutions, inserted layout copies, the largest
    arrays of a program near or over HBM, and what the cost model cannot cost. A result read back
    without its HLO (``from_dict`` of a report's event) gives the findings it was compiled with.
    Every figure is compiled for TPU by libtpu, not run (``result.label``)::

        result = tpu.compile_tensors(loss, "tpu:v5e")
        for finding in tpu.findings(result):
            print(finding.kind.value, finding.cost_model_seconds, finding.message)
    """
    if not result.hlo:
        return list(result.findings)
    memory = result.memory
    return read_findings(
        result.hlo, flops=result.flops, bytes_accessed=result.bytes_accessed,
        cost_model_seconds=result.cost_model_seconds, hbm_bytes=memory.total_bytes if memory else None,
        capacity_bytes=memory.capacity_bytes if memory else None,
    )
