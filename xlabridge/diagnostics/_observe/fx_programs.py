"""The TPU view's programs of Dynamo graphs that no XLA front end compiled, made after the run.

Input: the graphs the ``dynamo.graphs`` probe kept for a recorder that captures HLO (``--tpu``,
``diagnose(tpu=...)``), whatever backend the run handed them to (inductor, eager, aot_eager...).
A graph that torch_xla's bridge or TorchTPU's split compiler took has its XLA graphs' rows
already and is skipped. For the others, after the observed time (tracing and lowering import
JAX and are the diagnostics' own work): the programs AOTAutograd makes of it (``tpu._aot``:
inference, or forward and backward), each lowered to StableHLO by torchax (``tpu._fx``) and
saved beside the log; for a training call, also the forward and backward as one program with the
batch sharded over a mesh axis, which the TPU pass compiles per slice size to find the smallest
slice that fits. Output: one ``fx_program`` event per program, or per graph that could not be
traced, with the ops that have no TPU lowering (``breaks``) and why a program is missing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Sequence

from xlabridge.diagnostics import _frames
from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics._observe.probes.dynamo_graphs import Kept

logger = logging.getLogger(__name__)

MESH_AXIS = "data"
"""The mesh axis a training step's batch is sharded over (data parallelism)."""

NOT_AVAILABLE = (
    "the TPU view of graphs compiled by {backends} needs torchax and jax (the TorchTPU environment: "
    "pip install -r requirements/torchtpu.txt, torch 2.15): {why}"
)


def why_not_available() -> str | None:
    """Why graphs of other backends cannot be lowered for TPU here, or None when they can."""
    from xlabridge import _optional
    from xlabridge.tpu import _fx

    if not _fx.torchax_available():
        missing = [name for name in ("torchax", "jax") if not _optional.is_available(name)]
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"
    return None


def write(recorder: _recorder.Recorder, kept: Sequence[Kept]) -> None:
    """Give ``recorder`` the ``fx_program`` events of the graphs it kept (see the module docstring)."""
    bridged = {e.compile_id for e in recorder.events if isinstance(e, ev.BridgeGraph)}
    todo = [k for k in kept if k.compile_id not in bridged]
    if not todo or not recorder.capture_hlo:
        return
    why = why_not_available()
    if why is not None:
        message = NOT_AVAILABLE.format(backends=", ".join(sorted({k.backend for k in todo})), why=why)
        for graph in todo:
            recorder.add(ev.FxProgram(**_recorder.stamp(), compile_id=graph.compile_id, backend=graph.backend,
                                      role="", error=message, frames=graph.frames))
        return
    for number, graph in enumerate(todo):
        for event in _programs(recorder, number, graph):
            recorder.add(event)  # into the log too: observation has ended, the log is still open


def _programs(recorder: _recorder.Recorder, number: int, graph: Kept) -> list[ev.Event]:
    from xlabridge.tpu import _aot

    started = time.monotonic()
    common = {"compile_id": graph.compile_id, "backend": graph.backend, "frames": graph.frames}
    try:
        programs = _aot.trace_programs(graph.module(), graph.inputs, training=graph.training)
    except Exception as error:  # noqa: BLE001 - a graph AOTAutograd cannot trace here: its row says why
        logger.info("tracing Dynamo graph %s for TPU failed", graph.compile_id, exc_info=True)
        return [ev.FxProgram(**_recorder.stamp(), **common, role="",
                             error=f"tracing for TPU failed: {type(error).__name__}: {error}"[:2000],
                             seconds=time.monotonic() - started)]
    batch = _aot.batch_size(graph.inputs)
    out = [_program(recorder, f"{os.getpid()}-fx{number}-{p.role}", p, common, batch) for p in programs]
    roles = {p.role: p for p in programs}
    if "forward" in roles and "backward" in roles and not any(e.breaks or e.error for e in out):
        step = _aot.training_step(roles["forward"], roles["backward"])
        sharded = batch is not None and batch % 2 == 0 and step.batch_inputs
        out.append(_program(recorder, f"{os.getpid()}-fx{number}-step", step, common, batch,
                            mesh_axis=MESH_AXIS if sharded else ""))
    return out


def _program(recorder: _recorder.Recorder, name: str, program, common: dict, batch: int | None, *,
             mesh_axis: str = "") -> ev.FxProgram:
    from xlabridge.tpu import _fx

    started = time.monotonic()
    fx_ops = sum(n.op == "call_function" for n in program.graph_module.graph.nodes)
    fields = dict(common, role=program.role, fx_ops=fx_ops, batch=batch)
    try:
        breaks = _fx.missing_lowerings(program.graph_module)
        if breaks:
            return ev.FxProgram(**_recorder.stamp(), **fields, seconds=time.monotonic() - started, breaks=[
                ev.LoweringBreak(b.op, b.node, tuple(_frames.from_stack_trace(b.stack_trace))) for b in breaks])
        shardings = _fx.data_parallel_shardings(program.input_specs, program.batch_inputs, mesh_axis, 2) \
            if mesh_axis else None
        text = _fx.export_fx(program.graph_module, program.input_specs, in_shardings=shardings).mlir_module()
        path, hlo_file = recorder.hlo_path(f"{name}.stablehlo.mlir")
        path.write_text(text, encoding="utf-8")
    except _fx.FxLoweringError as error:  # torchax failed on one node: that node is the break
        logger.info("lowering %s for TPU failed", name, exc_info=True)
        return ev.FxProgram(**_recorder.stamp(), **fields, seconds=time.monotonic() - started,
                            error=f"lowering to StableHLO failed: {error}"[:2000], breaks=[
                                ev.LoweringBreak(error.op, error.node, tuple(_frames.from_stack_trace(error.stack_trace)))])
    except Exception as error:  # noqa: BLE001 - JAX refused the whole program: the row says why
        logger.info("lowering %s for TPU failed", name, exc_info=True)
        return ev.FxProgram(**_recorder.stamp(), **fields, seconds=time.monotonic() - started,
                            error=f"lowering to StableHLO failed: {type(error).__name__}: {error}"[:2000])
    return ev.FxProgram(**_recorder.stamp(), **fields, hash=hashlib.sha256(text.encode()).hexdigest(),
                        hlo_file=hlo_file, mesh_axis=mesh_axis, seconds=time.monotonic() - started)
