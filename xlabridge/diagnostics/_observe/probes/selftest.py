"""Does every probe see, on this torch and torch_xla? A tiny compile that must fire each one.

The program is ``selftest_child``; it runs in a child process, so that it disturbs nothing of the user's (no pending lazy
tensors, RNG draws, torch_xla metrics or Dynamo caches), once per (torch, torch_xla,
xlabridge, probe sources) combination: the result is kept in the user's cache directory
(``~/.cache/xlabridge/probes/``). Observation starts it in the background and reads it when
the observation ends; a probe that did not fire is then marked ``silent``.

The program compiles, with ``openxla``, a function with a Dynamo graph break and a CPU
fallback (``torch.exp2``), calls it past the fully measured calls, runs its backward (a
deferred backward compilation) and recompiles it for a new shape; then compiles one graph
with ``xlabridge``, runs a ``torch_xla.compile`` region and one op in eager mode. Without torch_xla the Dynamo
probes are checked with ``aot_eager``; where torch_tpu is installed, a function with a backward also goes
through ``backend="tpu"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from xlabridge import _env, _optional
from xlabridge._version import __version__
from xlabridge.diagnostics import events as ev

TIMEOUT_SECONDS = 300

NOT_IN_SELFTEST = {
    "torch.distributed": "needs a process group of several ranks",
    "torch.distributed.launcher": "needs torchrun's agent and its ranks",
    "inductor.compile_workers": "needs inductor's compile-worker pool (Triton, several compile threads)",
    "python.exit": "fires when an observed interpreter exits, after the observation of the self-test's program",
}
"""Probes the self-test's program cannot fire, and why: they are never marked silent by it (the tests of
torchrun jobs and of exits check them)."""


def expectations(
    events: Sequence[ev.Event], *, with_xla: bool, imported_xla: bool = True, with_torchtpu: bool = False
) -> dict[str, str]:
    """For each probe, what it failed to record in the self-test's ``events`` ("" if nothing);
    ``imported_xla``: whether the program imported torch_xla while observed; ``with_torchtpu``:
    whether it compiled with TorchTPU's ``backend="tpu"``."""

    def of(kind: type[ev.Event]) -> list:
        return [e for e in events if isinstance(e, kind)]

    missing: dict[str, list[str]] = {}

    def need(probe: str, ok: bool, what: str) -> None:
        missing.setdefault(probe, [])
        if not ok:
            missing[probe].append(what)

    compiles = of(ev.DynamoCompile)
    need("dynamo.compiles", any(c.trigger == "dynamo" for c in compiles), "no frame compilation")
    need("dynamo.compiles", any(c.trigger == "lazy_backward" for c in compiles), "no deferred backward compilation")
    need("dynamo.compiles", any(r.reason for r in of(ev.Recompile)), "no recompilation with a reason")
    graphs = of(ev.GraphCaptured)
    need("dynamo.graphs", any(g.backend != "xlabridge" for g in graphs), "no graph of another backend")
    need("dynamo.graphs", bool(of(ev.GraphBreak)), "no graph break")
    calls = of(ev.CompiledCalls)
    need("backend.calls", any(c.role == "forward" and c.calls for c in calls), "no call of an aot_eager graph")
    need("backend.calls", any(c.role == "backward" and c.calls for c in calls), "no backward of an aot_eager graph")
    need("dynamo.breaks", bool(of(ev.TorchBreak)), "no graph break as torch records it")
    need("dynamo.requests", any(r.how == "torch.compile" for r in of(ev.CompileRequest)), "no torch.compile request")
    if with_xla:
        need("dynamo.graphs", any(g.backend == "xlabridge" for g in graphs), "no graph of the xlabridge backend")
        bridged = of(ev.BridgeGraph)
        need("xla.helper", any(b.role == "forward" for b in bridged), "no forward graph")
        need("xla.helper", any(b.role == "backward" for b in bridged), "no backward graph")
        need("xla.helper", bool(of(ev.GraphCalls)), "no summed later calls")
        partitions = of(ev.Partitioned)
        need("xla.bridge", any(s.node and s.node.fallback_ops for p in partitions for s in p.segments),
             "no CPU node with fallback ops")
        need("xla.bridge", bool(of(ev.XlaGraphSeen)), "no XLA graph hash")
        need("xla.sync", any(s.frames for s in of(ev.Sync)), "no torch_xla.sync() with its stack")
        kinds = {s.what for s in of(ev.Sync)}
        need("xla.sync", "torch_xla.compile" in kinds, "no torch_xla.compile region")
        need("xla.sync", "xm.wait_device_ops" in kinds, "no xm.wait_device_ops()")
        if imported_xla:
            need("python.imports", any(i.module == "torch_xla" for i in of(ev.Imported)), "no import of torch_xla")
        need("xla.metrics", any(c.executions for c in of(ev.GraphCalled)), "no execution counted")
        need("xla.metrics", any(c.phase == ev.XlaPhase.EXTRACTION and c.count for c in of(ev.XlaCompile)),
             "no XLA compilation counted")
        eager = of(ev.EagerOps)
        need("xla.eager", any(e.executions and e.spans for e in eager), "no eager-mode op execution timed")
        need("xla.eager", any(e.compiles for e in eager), "no eager-mode op compilation counted")
    if with_torchtpu:
        ours = {b.graph: b for b in of(ev.BridgeGraph) if b.compiler == "torchtpu"}
        need("torchtpu.compiler", any(b.role == "forward" for b in ours.values()), "no TorchTPU forward graph")
        need("torchtpu.compiler", any(b.role == "backward" for b in ours.values()), "no TorchTPU backward graph")
        need("torchtpu.compiler", any(p.graph in ours and p.segments for p in of(ev.Partitioned)),
             "no partition of a TorchTPU graph")
        need("torchtpu.compiler", any(c.graph in ours for c in of(ev.GraphCalls)), "no summed later calls")
    return {probe: "; ".join(items) for probe, items in missing.items()}


def _versions_key() -> str:
    from importlib import metadata

    import torch

    def version(package: str) -> str:
        try:
            return metadata.version(package) if _optional.is_available(package) else "none"
        except metadata.PackageNotFoundError:
            return "none"

    xla = version("torch_xla")
    if _optional.is_available("torch_tpu"):
        xla += f"_torchtpu-{version('torch_tpu')}"
    sources = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        sources.update(path.read_bytes())
    return f"torch-{torch.__version__}_xla-{xla}_xlabridge-{__version__}_{sources.hexdigest()[:12]}"


def cache_path() -> Path:
    return _env.cache_home() / "xlabridge" / "probes" / f"{_versions_key()}.json"


class Run:
    """A self-test: read from the cache, or running in a child process."""

    def __init__(self) -> None:
        self.path = cache_path()
        self.result: dict[str, str] | None = None
        self.error = ""
        self._child: subprocess.Popen[str] | None = None
        if self.path.is_file():
            try:
                self.result = json.loads(self.path.read_text(encoding="utf-8"))
                return
            except (OSError, ValueError):
                pass
        from xlabridge.pod._capture import without_capture

        # the child writes neither a report of its own nor into this process's capture
        env = without_capture(os.environ)
        env.pop(_env.REPORT_DIR, None)
        env.pop(_env.TORCH_TRACE, None)  # its compiles are not the user's: they stay out of the user's trace
        env[_env.PJRT_DEVICE] = "CPU"
        self._child = subprocess.Popen(
            [sys.executable, "-c", "from xlabridge.diagnostics._observe.probes import selftest_child; selftest_child.main()"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )

    def wait(self) -> dict[str, str] | None:
        """The result (``{probe: what did not fire}``), waiting for the child if it runs."""
        if self._child is None:
            return self.result
        child, self._child = self._child, None
        try:
            out, err = child.communicate(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            self.error = f"the self-test did not finish in {TIMEOUT_SECONDS} s"
            return None
        lines = out.strip().splitlines()
        try:
            self.result = json.loads(lines[-1]) if child.returncode == 0 and lines else None
        except ValueError:
            self.result = None
        if self.result is None:
            self.error = f"the self-test failed (exit {child.returncode}): {err.strip()[-400:]}"
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(self.result), encoding="utf-8")
        partial.replace(self.path)
        return self.result
