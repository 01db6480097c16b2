"""The TPU view's compiles: each distinct XLA graph of a run compiled for a TPU topology, after it.

Input: the run's events. Every ``xla_graph`` event whose module was saved (``hlo_file``, relative
to ``base``: torch_xla's HLO proto, or the StableHLO of a TorchTPU partition) names a graph; distinct ``(hash, num_partitions)`` pairs
are compiled once each, in one ``xlabridge.tpu.TpuCompiler`` worker (libtpu never loads in
this process), after the user's code has finished, so the run's own steps are not slowed.
Each graph is compiled by the TPU view (``xlabridge.tpu.compile_row``). Output: one
``tpu_compiled`` event per graph and one ``tpu_pass`` event with the pass's cost;
the report joins them to its XLA graphs by hash. A graph XLA:TPU refuses, or one whose worker
dies, gets an event with the error and the pass goes on with the next graph.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics import events as ev
from xlabridge.errors import MissingDependencyError, TpuWorkerError, UnknownTopologyError

logger = logging.getLogger(__name__)

def check_target(target: str, *, argument: str = "tpu") -> str:
    """``target`` resolved to libtpu's topology name, or a clear error naming ``argument``.

    Raises ``TypeError``/``UnknownTopologyError`` for a bad name and ``MissingDependencyError``
    when jax or libtpu is missing, before anything runs.
    """
    from xlabridge import tpu

    if not isinstance(target, str) or not target:
        raise TypeError(f"{argument!r} must be a TPU topology name such as 'v5e:2x2', got {target!r}")
    try:
        topology = tpu.resolve_target(target)
    except UnknownTopologyError as error:
        raise UnknownTopologyError(f"{argument}={target!r}: {error}") from None
    tpu.check_dependencies()
    return topology.name


def graphs_to_compile(events: Sequence[ev.Event]) -> list[ev.XlaGraphSeen]:
    """The first ``xla_graph`` event of each distinct ``(hash, num_partitions)``, preferring one
    with a saved HLO proto."""
    chosen: dict[tuple[str, int], ev.XlaGraphSeen] = {}
    for event in events:
        if not isinstance(event, ev.XlaGraphSeen):
            continue
        key = (event.hash, event.num_partitions)
        if key not in chosen or (chosen[key].hlo_file is None and event.hlo_file is not None):
            chosen[key] = event
    return list(chosen.values())


def programs_to_compile(events: Sequence[ev.Event]) -> list[ev.FxProgram]:
    """The first ``fx_program`` event of each distinct lowered program (any backend's Dynamo graphs)."""
    chosen: dict[str, ev.FxProgram] = {}
    for event in events:
        if isinstance(event, ev.FxProgram) and event.hlo_file and event.hash not in chosen:
            chosen[event.hash] = event
    return list(chosen.values())


def _collectives(hlo: str) -> list[dict[str, object]]:
    from xlabridge.pod import find_collectives, totals

    return [
        {"kind": kind.value, "count": total.count, "bytes": total.bytes}
        for kind, total in sorted(totals(find_collectives(hlo)).items(), key=lambda item: item[0].value)
    ]


def run(
    events: Sequence[ev.Event],
    *,
    target: str,
    base: Path,
    save_tpu_hlo: bool = True,
    timeout: float | None = None,
) -> list[ev.Event]:
    """Compile the graphs of ``events`` for ``target``; the ``tpu_compiled`` and ``tpu_pass`` events.

    ``base`` is the directory ``hlo_file`` names are relative to; with ``save_tpu_hlo`` each
    graph's optimized TPU HLO is written beside its proto (``<proto>.<topology>.tpu.txt``).
    ``timeout`` bounds each compile (seconds).
    """
    from xlabridge import tpu

    start = time.monotonic()
    graphs: list[ev.XlaGraphSeen | ev.FxProgram] = [*graphs_to_compile(events)]
    steps = []
    for program in programs_to_compile(events):
        (steps if program.role == "training-step" else graphs).append(program)
    topology = tpu.resolve_target(target)
    out: list[ev.Event] = []

    def finish(**fields: object) -> list[ev.Event]:
        out.append(ev.TpuPass(**_recorder.stamp(), start=start, topology=topology.name,
                              generation=topology.generation, graphs=len(graphs), **fields))
        return out

    if not graphs and not steps:  # nothing to compile: no worker to start
        return finish()
    try:
        compiler = tpu.TpuCompiler(topology, timeout=timeout)
        versions = compiler.versions
    except (MissingDependencyError, TpuWorkerError) as error:
        return finish(error=str(error))
    with compiler:
        for graph in graphs:
            out.append(_compile_one(compiler, graph, base, topology.name, save_tpu_hlo))
        for step in steps:
            out.append(_slice(compiler, step, base, topology))
    logger.info("compiled %d graphs for %s in %.1f s", len(graphs), topology.name, time.monotonic() - start)
    return finish(libtpu_version=versions.get("libtpu", ""), jax_version=versions.get("jax", ""))


def _slice(compiler, step: ev.FxProgram, base: Path, topology) -> ev.TpuSlice:
    """The smallest slice of ``topology``'s generation that fits the training step ``step``."""
    from xlabridge.tpu import _slices

    common = {"compile_id": step.compile_id, "hash": step.hash, "generation": topology.generation,
              "batch": step.batch}
    try:
        text = (base / step.hlo_file).read_text(encoding="utf-8")
    except OSError as error:
        return ev.TpuSlice(**_recorder.stamp(), **common, reason=f"cannot read the step's StableHLO: {error}")
    attempts, reason = _slices.smallest_slice(compiler, text, topology.generation, axis=step.mesh_axis,
                                              batch=step.batch, name=step.hash[:16])
    fit = next((a for a in attempts if a.fits), None)
    return ev.TpuSlice(**_recorder.stamp(), **common, tried=[a.to_dict() for a in attempts],
                       chips=fit.chips if fit else None, topology=fit.topology if fit else "",
                       mesh={step.mesh_axis: fit.devices} if fit else {}, reason=reason)


def _compile_one(compiler, graph: ev.XlaGraphSeen | ev.FxProgram, base: Path, topology: str,
                 save_tpu_hlo: bool) -> ev.TpuCompiled:
    from xlabridge import tpu

    started = time.monotonic()
    common = {"hash": graph.hash, "num_partitions": getattr(graph, "num_partitions", 1), "hlo_file": graph.hlo_file}

    def event(**fields: object) -> ev.TpuCompiled:
        return ev.TpuCompiled(**_recorder.stamp(), start=started, **common, **fields)

    if graph.hlo_file is None:
        return event(error=getattr(graph, "hlo_error", "") or "no HLO proto was saved for this graph (the bridge probe "
                     "could not capture it)")
    path = base / graph.hlo_file
    stablehlo = graph.hlo_format == ev.HloFormat.STABLEHLO
    try:
        module = path.read_text(encoding="utf-8") if stablehlo else path.read_bytes()
    except OSError as error:
        return event(error=f"cannot read the graph's {'StableHLO' if stablehlo else 'HLO proto'} {path}: {error}")
    row = tpu.compile_row(compiler, tpu.Program(
        graph.hash[:16], module, tpu.ProgramFormat.STABLEHLO if stablehlo else tpu.ProgramFormat.HLO_PROTO,
        common["num_partitions"],
    ))
    if row.result is None:
        return event(error=row.error)
    result = row.result
    tpu_hlo_file = None
    if save_tpu_hlo and result.hlo:
        tpu_path = path.with_name(f"{path.name}.{topology.replace(':', '_')}.tpu.txt")
        try:
            tpu_path.write_text(result.hlo, encoding="utf-8")
            tpu_hlo_file = str(tpu_path.relative_to(base))
        except OSError as error:
            logger.warning("cannot save the TPU HLO of %s: %s", graph.hash, error)
    data = result.to_dict()
    data.pop("hlo", None)
    collectives = _collectives(result.hlo) if result.hlo and common["num_partitions"] > 1 else []
    return event(result=data, tpu_hlo_file=tpu_hlo_file, collectives=collectives)
