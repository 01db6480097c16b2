"""Sharded training runs on 4 and 8 PJRT CPU devices: collectives, the planted cause, neutrality.

Each device count runs one worker process (``_sharded_worker``) captured the way the report
captures a run (``xlabridge.pod.capture_environment``: XLA's dump of every compiled module as
text and proto, torch_xla's debug file, source lines), and on 4 devices a second, plain worker
with the same scenarios to check that capturing changes no number. The device count is fixed
when torch_xla starts, hence processes. Both use ``--xla_backend_optimization_level=0``: it
sets XLA:CPU's LLVM optimization level only (the HLO passes, and with them the partitioning
and the collectives, are unchanged) and cuts the SPMD GPT-2 compile four-fold.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_xla
from tests.pod import _proto_reference
from xlabridge import _optional
from xlabridge.diagnostics._build.collective_causes import classify_collective
from xlabridge.pod import (
    CollectiveKind,
    CompiledModule,
    GraphCause,
    capture_environment,
    partition_hlo,
    read_capture,
)

pytestmark = requires_xla

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = ("mlp", "mlp_fixed", "mlp_compile", "mlp_fixed_compile", "gpt2", "gpt2_compile")
# Every scenario on 4 devices; on 8, all but GPT-2 under torch.compile (the slowest to compile
# here: Dynamo, AOTAutograd and an SPMD XLA:CPU compile; its 4-device run covers that path).
RUN = {4: SCENARIOS, 8: tuple(s for s in SCENARIOS if s != "gpt2_compile")}
XLA_FLAGS = "--xla_backend_optimization_level=0"
# Lazy scenarios whose pre-partition graph is partitioned again by ``partition_hlo``.
PROBED = {4: ("mlp", "gpt2"), 8: ("mlp",)}


@dataclasses.dataclass
class Runs:
    devices: int
    directory: Path
    observed: dict
    plain: dict | None

    @functools.cached_property
    def capture(self):
        return read_capture(self.directory / "capture")

    def modules(self, scenario: str) -> list[CompiledModule]:
        """Modules XLA compiled for the scenario's training steps (named by the worker)."""
        return [m for m in self.capture.modules if m.name.rsplit(".", 1)[0] == scenario]


def _worker(out: Path, devices: int, *, observed: bool) -> subprocess.Popen:
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices), XLA_FLAGS=XLA_FLAGS)
    if observed:
        env.update(capture_environment(out / "capture", xla_flags=XLA_FLAGS))
    probes = ",".join(PROBED[devices]) if observed else ""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.pod._sharded_worker", str(out), "--probe", probes, *RUN[devices]],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait(process: subprocess.Popen, out: Path) -> dict:
    _, stderr = process.communicate(timeout=1200)
    assert process.returncode == 0, stderr[-4000:]
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module", params=[4, 8], ids=lambda n: f"{n}dev")
def runs(request, tmp_path_factory) -> Runs:
    devices = request.param
    observed_dir = tmp_path_factory.mktemp(f"observed{devices}")
    plain_dir = tmp_path_factory.mktemp(f"plain{devices}")
    # Neutrality is checked on 4 devices; both workers run side by side.
    processes = [(_worker(observed_dir, devices, observed=True), observed_dir)]
    if devices == 4:
        processes.append((_worker(plain_dir, devices, observed=False), plain_dir))
    results = [_wait(process, out) for process, out in processes]
    return Runs(devices, observed_dir, results[0], results[1] if len(results) > 1 else None)


def _library_view(module: CompiledModule) -> list[tuple]:
    graph = module.analyze()
    return sorted(
        (c.kind.value, c.bytes, c.replica_groups, c.channel_id, c.executions,
         (c.source.file, c.source.line, c.source.op_type) if c.source else ("", 0, ""))
        for c in graph.collectives
    )


def _reference_view(module: CompiledModule) -> list[tuple]:
    return sorted(
        (c["kind"], c["bytes"], c["groups"], c["channel_id"], c["executions"], c["source"])
        for c in _proto_reference.collectives(module.proto)
    )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_collectives_equal_a_count_from_the_proto(runs, scenario):
    if scenario not in RUN[runs.devices]:
        pytest.skip(f"{scenario} runs on 4 devices only")
    modules = runs.modules(scenario)
    assert modules, f"no module compiled for {scenario}"
    counted = 0
    for module in modules:
        assert module.proto is not None
        assert _library_view(module) == _reference_view(module), module.name
        counted += len(_library_view(module))
    # A sharded training step communicates: a comparison of two empty lists would prove nothing.
    assert counted > 0


def _all_gathers(runs: Runs, scenario: str):
    for module in runs.modules(scenario):
        graph = module.analyze()
        for collective in graph.collectives:
            if collective.kind is CollectiveKind.ALL_GATHER:
                yield collective, classify_collective(collective, graph)


def _planted_line() -> int:
    from xlabridge.examples.sharded_train import Block

    lines, first = inspect.getsourcelines(Block.forward)
    return first + next(i for i, line in enumerate(lines) if "self.down(" in line)


def _is_user(path: str) -> bool:
    return "site-packages" not in path and not path.startswith("<")


def test_planted_all_gather_is_reported_at_its_line_and_goes_away_when_fixed(runs):
    planted = list(_all_gathers(runs, "mlp"))
    assert planted, "the planted sharding produced no all-gather"
    assert all(cause.avoidable for _, cause in planted)
    lines = {c.user_frame(_is_user) for c, _ in planted} - {None}
    assert {(Path(f.filename).name, f.lineno) for f in lines} == {("sharded_train.py", _planted_line())}
    assert list(_all_gathers(runs, "mlp_fixed")) == []


def test_planted_all_gather_under_torch_compile_goes_away_when_fixed(runs):
    assert any(True for _ in _all_gathers(runs, "mlp_compile"))
    assert list(_all_gathers(runs, "mlp_fixed_compile")) == []


def test_capturing_changes_no_number(runs):
    if runs.plain is None:
        pytest.skip("neutrality is checked on the 4-device runs")
    for scenario in SCENARIOS:
        observed, plain = runs.observed[scenario], runs.plain[scenario]
        assert observed["losses"] == plain["losses"], scenario
        assert observed["weights"] == plain["weights"], scenario


def test_every_compiled_graph_is_joined_to_the_module_compiled_for_it(runs):
    """The join uses compilation order and argument/result counts; torch_xla's own names check it:
    ``torch_xla.compile(name=...)`` names each module compiled in its region, and its debug file
    says which region part cut each graph."""
    compiled = [graph for graph in runs.capture.trace.graphs if graph.compiles]
    assert compiled
    modules = [runs.capture.module_of(graph) for graph in compiled]
    assert None not in modules
    assert len({m.module_id for m in modules}) == len(modules)
    for graph, module in zip(compiled, modules):
        region = module.name.rsplit(".", 1)[0]
        if graph.cause is GraphCause.PENDING_FLUSH:
            assert region.endswith("_clear_pending"), (graph.cause_text, module.name)
        elif graph.cause is GraphCause.DYNAMO_EXECUTE:
            assert region.endswith("_compile"), (graph.cause_text, module.name)
        else:
            assert region in RUN[runs.devices], (graph.cause_text, module.name)


@pytest.mark.skipif(not _optional.is_available("jax"), reason="needs jax (jaxlib's XLA partitions the graph)")
@pytest.mark.parametrize(
    "scenario",
    [
        "mlp",
        pytest.param("gpt2", marks=pytest.mark.xfail(strict=True, reason=(
            "jaxlib 0.7.1's SPMD partitioner gives GPT-2's training step 79 collectives on 4 "
            "devices where torch_xla 2.9's XLA gives 70 (6 more all-gathers, 3 more all-to-alls; "
            "all of the run's are among them): partition_hlo approximates, the dump is exact"))),
    ],
)
def test_partitioning_in_a_worker_gives_the_collectives_the_run_compiled(runs, scenario):
    if scenario not in PROBED[runs.devices]:
        pytest.skip(f"{scenario} is probed on {[n for n, s in PROBED.items() if scenario in s]} devices")
    proto = (runs.directory / f"{scenario}.pb").read_bytes()
    [ours] = partition_hlo([proto], runs.devices)
    [theirs] = [m for m in runs.capture.modules if m.name.startswith(f"{scenario}_probe")]

    def shape(module: CompiledModule) -> list[tuple]:
        return sorted((c.kind.value, c.bytes, c.replica_groups, c.source_target_pairs) for c in module.analyze().collectives)

    assert shape(ours) == shape(theirs)
    assert shape(ours)
    # The Python stacks XLA_HLO_DEBUG recorded survive the worker's conversion.
    assert any(c.stack for c in ours.analyze().collectives)
