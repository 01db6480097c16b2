"""The TPU view: programs compiled for a TPU topology by libtpu, one row each.

Every part of xlabridge that shows what a TPU would make of a program comes here: the
diagnostics' view of a run (each distinct XLA graph, compiled after the run), the pod view
(each sharded graph over a slice, ``xlabridge.pod.compile_for_pod``), TorchTPU's captured graphs
(``xlabridge.torchtpu.compile_graphs``, lowered to StableHLO first) and kernel counts of a
function for a TPU (``xlabridge.hlo.kernel_count(..., target="tpu:v5e")``).

A ``Program`` is a module in one of the forms XLA takes (an HLO module proto, as torch_xla
hands it over, shardings and buffer donors included; or StableHLO text), with the number of
devices it is partitioned over. ``compile_program`` compiles one and raises what the compiler
raises; ``compile_row`` turns the compile of one into a ``TpuRow``, which holds either the
result or why there is none (XLA:TPU refused the program, or its worker died), so that one
program that does not compile leaves the others' rows intact. Every figure is labelled
"compiled for TPU <gen> by libtpu <ver>, not run".
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Iterable

from xlabridge.errors import TpuCompileError, TpuWorkerError
from xlabridge.tpu._compiler import TpuCompiler
from xlabridge.tpu._result import TpuCompileResult
from xlabridge.tpu._topology import Topology

__all__ = ["Program", "ProgramFormat", "TpuRow", "compile_program", "compile_row", "compile_rows"]

logger = logging.getLogger(__name__)

ERROR_CHARS = 2000
"""Characters of XLA:TPU's message kept in a row (the whole message stays beside the saved graph)."""


class ProgramFormat(str, enum.Enum):
    """The form a program is given in."""

    HLO_PROTO = "hlo-proto"
    """A serialized ``HloModuleProto`` (torch_xla's graphs; shardings and donors included)."""
    STABLEHLO = "stablehlo"
    """StableHLO (MLIR) text or bytecode (JAX's lowering, TorchTPU's graphs through torchax)."""


@dataclasses.dataclass(frozen=True)
class Program:
    """One program to compile for a TPU."""

    name: str
    module: bytes | str
    format: ProgramFormat
    num_partitions: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.format, ProgramFormat):
            raise TypeError(f"Program: 'format' must be a ProgramFormat, got {self.format!r}")
        if not isinstance(self.num_partitions, int) or self.num_partitions < 1:
            raise ValueError(f"Program: 'num_partitions' must be a positive int, got {self.num_partitions!r}")


@dataclasses.dataclass(frozen=True)
class TpuRow:
    """What libtpu made of one program: its ``result``, or the ``error`` that stopped it."""

    name: str
    result: TpuCompileResult | None
    error: str | None
    seconds: float
    """Wall seconds of this compile, seen from the calling process."""


def compile_program(compiler: TpuCompiler, program: Program, *, topology: str | Topology | None = None) -> TpuCompileResult:
    """Compile ``program`` with ``compiler`` (for ``topology``, default the compiler's own).

    Raises ``TpuCompileError`` when XLA:TPU refuses it, ``TpuWorkerError`` when libtpu's worker dies.
    """
    compile_module = (
        compiler.compile_stablehlo if program.format is ProgramFormat.STABLEHLO else compiler.compile_hlo_proto
    )
    return compile_module(program.module, num_partitions=program.num_partitions, topology=topology, name=program.name)


def compile_row(compiler: TpuCompiler, program: Program, *, topology: str | Topology | None = None) -> TpuRow:
    """``compile_program``, its failure kept in the row instead of raised."""
    started = time.monotonic()
    try:
        result = compile_program(compiler, program, topology=topology)
    except TpuCompileError as error:
        message = f"XLA:TPU refused the graph: {(error.xla_message or str(error))[:ERROR_CHARS]}"
        return TpuRow(program.name, None, message, time.monotonic() - started)
    except (TpuWorkerError, ValueError) as error:
        return TpuRow(program.name, None, str(error)[:ERROR_CHARS], time.monotonic() - started)
    return TpuRow(program.name, result, None, time.monotonic() - started)


def compile_rows(
    programs: Iterable[Program], target: str | Topology, *, compiler: TpuCompiler | None = None
) -> list[TpuRow]:
    """A row per program, compiled for ``target``; ``compiler``: an open ``TpuCompiler`` to reuse
    (its worker stays up), by default one started for these programs and closed after."""
    own = compiler is None
    compiler = TpuCompiler(target) if own else compiler
    try:
        rows = [compile_row(compiler, program, topology=target) for program in programs]
    finally:
        if own:
            compiler.close()
    logger.info("compiled %d programs for %s", len(rows), target)
    return rows
