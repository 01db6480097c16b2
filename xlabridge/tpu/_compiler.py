"""Compiling graphs for a TPU topology through libtpu's compile-only client, in a worker process.

``TpuCompiler`` is a session: it starts one worker process (``_worker.py``, a few seconds:
importing JAX and libtpu) on first use and sends it every compile, so a report's tens of graphs
pay the start-up once. libtpu never loads in the calling process: it must not meet torch_xla's
PJRT client there, and a C++ check failure inside libtpu then kills only the worker, which
surfaces as ``TpuWorkerError`` (and the next compile starts a fresh worker).

Inputs: an HLO module proto (what torch_xla hands XLA), torch tensors on the XLA device (their
pending lazy graph becomes that proto here), StableHLO text, or a JAX function with argument
specs, which the worker lowers for TPU: lowering in the calling process would initialise JAX's
backends there, and with libtpu installed that loads libtpu into it (and takes libtpu's
process lock). Pallas TPU kernels in the function are lowered to Mosaic and compiled by libtpu.

``num_partitions=N`` (or a ``mesh`` for JAX functions) compiles the graph SPMD-partitioned over
the topology's first N devices; the result's figures are per device.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xlabridge import _env, _optional
from xlabridge._upstream import torch_xla as upstream_xla
from xlabridge.tpu._kernels import parse_kernels
from xlabridge.errors import MissingDependencyError, TpuCompileError, TpuWorkerError, UnknownTopologyError
from xlabridge.tpu import _findings, _worker
from xlabridge.tpu._findings import uncosted_custom_calls
from xlabridge.tpu._result import HbmUsage, TpuCompileResult
from xlabridge.tpu._topology import KNOWN_TOPOLOGIES, Topology, resolve_target

__all__ = ["TpuCompiler", "compile_hlo_proto", "compile_jax", "compile_stablehlo", "compile_tensors"]

logger = logging.getLogger(__name__)

DEFAULT_TARGET = "tpu:v5e"
INSTALL_HINT = "pip install 'xlabridge[tpu-compile]' (jax 0.7.1 and libtpu 0.0.23)"

# XLA's own messages can hold a whole HLO module; the exception shows this much of it and the
# rest is saved next to the graph.
_MESSAGE_CHARS = 2000
_PALLAS_VERSION_REFUSAL = "Unsupported version"
_FATAL_LOG_LINE = re.compile(r"^F\d{4} |Check failed")


def check_dependencies() -> None:
    """Raise ``MissingDependencyError`` (with the extra to install) unless jax and libtpu are installed."""
    missing = [module for module in ("jax", "libtpu") if not _optional.is_available(module)]
    if missing:
        raise MissingDependencyError(
            f"xlabridge.tpu compiles with libtpu's compile-only client through JAX, and "
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: {INSTALL_HINT}."
        )


class TpuCompiler:
    """A session with one TPU compile worker; use as a context manager (or call ``close``).

    ``target`` is the default topology of every compile (``"tpu:v5e"``, ``"tpu:v6e:2x4"``,
    ``"v5p:2x2x1"``); each compile method takes ``topology=`` to use another one.
    ``graph_dir`` is where graphs are saved before compiling: a refused graph, or one that
    killed the worker, stays there with the dead worker's log, and the error gives their paths
    (default: a fresh temporary directory, removed at ``close`` if nothing stayed).
    ``keep_graphs=True`` keeps every graph.
    ``timeout`` (seconds) bounds each compile; the worker is killed when it runs over.
    """

    def __init__(
        self,
        target: str | Topology = DEFAULT_TARGET,
        *,
        graph_dir: str | os.PathLike[str] | None = None,
        keep_graphs: bool = False,
        timeout: float | None = None,
    ) -> None:
        self.topology = resolve_target(target)
        check_dependencies()
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        self._graph_dir = Path(graph_dir) if graph_dir is not None else None
        self._own_graph_dir = graph_dir is None
        self._keep_graphs = keep_graphs
        self._timeout = timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: str | None = None
        self._versions: dict[str, str] = {}
        self._described: set[str] = set()

    def __enter__(self) -> TpuCompiler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def versions(self) -> dict[str, str]:
        """``{"libtpu": ..., "jax": ...}`` of the worker (starts it if needed)."""
        self._ensure_started()
        return dict(self._versions)

    def close(self) -> None:
        """Stop the worker, and remove the default graph directory if it is empty."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                process.stdin.write(_worker.encode({"op": "exit"}))
                process.stdin.close()
                process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
        if process is not None and self._log_path and process.returncode == 0:
            os.remove(self._log_path)
        if self._own_graph_dir and self._graph_dir is not None:
            try:
                self._graph_dir.rmdir()
            except OSError:  # graphs of failed compiles stay, for the user to read
                pass

    # -- the four inputs

    def compile_hlo_proto(
        self, proto: bytes, *, num_partitions: int = 1, topology: str | Topology | None = None, name: str = "graph"
    ) -> TpuCompileResult:
        """Compile a serialized HLO module proto (``torch_xla._XLAC._get_xla_tensors_hlo_proto``).

        Its input/output aliasing and buffer donors (torch_xla's donation of what a step
        replaces) are compiled with it: XLA:TPU pairs each donor with an output it can reuse.
        """
        if not isinstance(proto, bytes):
            raise TypeError(f"proto must be the bytes of a serialized HloModuleProto, got {type(proto).__name__}")
        return self._compile_module(proto, "hlo-proto", "hlo.txt", num_partitions, topology, name)

    def compile_stablehlo(
        self, module: str | bytes, *, num_partitions: int = 1, topology: str | Topology | None = None, name: str = "graph"
    ) -> TpuCompileResult:
        """Compile a StableHLO module (MLIR text or bytecode), e.g. ``jax.jit(f).lower(...).as_text()``."""
        if not isinstance(module, (str, bytes)):
            raise TypeError(f"module must be StableHLO text or bytecode, got {type(module).__name__}")
        return self._compile_module(module, "stablehlo", "mlir", num_partitions, topology, name)

    def compile_tensors(
        self,
        tensors: Any,
        *,
        num_partitions: int = 1,
        topology: str | Topology | None = None,
        name: str = "graph",
    ) -> TpuCompileResult:
        """Compile the pending lazy graph that computes ``tensors`` (XLA tensors, one or a sequence).

        The graph is taken as torch_xla would hand it to XLA, without running it. Under
        torch_xla SPMD (``xr.use_spmd()``) it carries the tensors' shardings; pass the mesh's
        device count as ``num_partitions``. It carries no buffer donation: torch_xla marks its
        donors only in the graph a step marker compiles (XLA's dump of that graph has them, and
        ``compile_hlo_proto`` of it honors them).
        """
        import torch

        _optional.require("torch_xla", "xlabridge.tpu.compile_tensors")
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        wrong = [i for i, t in enumerate(tensors) if not isinstance(t, torch.Tensor) or t.device.type != "xla"]
        if not tensors or wrong:
            problem = f"not so at position(s) {wrong}" if wrong else "got an empty sequence"
            raise ValueError(f"tensors must be torch tensors on the XLA device (one, or a non-empty sequence): {problem}")
        proto = upstream_xla.tensors_hlo_proto(tensors)
        return self.compile_hlo_proto(proto, num_partitions=num_partitions, topology=topology, name=name)

    def compile_jax(
        self,
        fn: Callable[..., Any] | str,
        *args: Any,
        mesh: Mapping[str, int] | None = None,
        in_specs: Sequence[Any] | None = None,
        topology: str | Topology | None = None,
        name: str | None = None,
    ) -> TpuCompileResult:
        """Lower ``fn`` for TPU on arguments of ``args``' shapes and dtypes, and compile it.

        ``fn`` is lowered in the worker, so it must be importable there: a module-level
        function, a ``functools.partial`` of one (static arguments bound), or a
        ``"package.module:function"`` string. ``args`` are ``jax.ShapeDtypeStruct``s (anything
        with a shape and a NumPy dtype). ``mesh`` (``{"x": 4}``) partitions the program over
        that many devices; ``in_specs`` gives each argument's ``PartitionSpec`` over it (None:
        replicated).
        """
        reference = _function_reference(fn)
        specs = [_arg_spec(i, a) for i, a in enumerate(args)]
        mesh_axes = _mesh_axes(mesh)
        if in_specs is not None:
            if mesh_axes is None:
                raise ValueError("in_specs needs a mesh: pass mesh={'axis': size, ...} too")
            if len(in_specs) != len(specs):
                raise ValueError(f"in_specs has {len(in_specs)} entries for {len(specs)} arguments")
            in_specs = [None if spec is None else tuple(spec) for spec in in_specs]
        name = name or _function_name(fn)
        key = repr((fn if isinstance(fn, str) else reference, specs, mesh_axes, in_specs)).encode()
        request = {"op": "compile-jax", "fn": reference, "args": specs, "mesh": mesh_axes, "in_specs": in_specs}
        return self._run_compile(request, key, "mlir", topology, name)

    # -- compiling

    def _compile_module(
        self, module: str | bytes, fmt: str, extension: str, num_partitions: int, topology: Any, name: str
    ) -> TpuCompileResult:
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise ValueError(f"num_partitions must be a positive int, got {num_partitions!r}")
        data = module.encode() if isinstance(module, str) else module
        request = {"op": "compile", "module": module, "format": fmt, "num_partitions": num_partitions}
        return self._run_compile(request, data, extension, topology, name)

    def _run_compile(
        self, request: dict[str, Any], key: bytes, extension: str, topology: Any, name: str
    ) -> TpuCompileResult:
        topo = self.topology if topology is None else resolve_target(topology)
        self._describe(topo)
        graph_path = self._graph_path(name, key, extension)
        request = {**request, "topology": topo.libtpu_name, "graph_path": str(graph_path), "keep_graph": self._keep_graphs}
        reply = self._request(request, what=f"compiling graph {name!r} for {topo}", graph_path=graph_path)
        status = reply["status"]
        if status == _worker.BAD_REQUEST:
            raise ValueError(reply["message"])
        if status == _worker.REFUSED:
            raise self._refusal(reply["message"], topo, name, graph_path)
        devices = reply["devices"]
        count = reply["num_partitions"]
        per_chip = sum(1 for _, coords, _ in devices if coords == devices[0][1])
        capacity = topo.chip.hbm_bytes // per_chip
        memory = HbmUsage(**reply["memory"], capacity_bytes=capacity) if status == _worker.OK else None
        hlo = reply.get("hlo", "")
        cost = dict(reply.get("cost") or {})
        uncosted = tuple(uncosted_custom_calls(hlo)) if hlo else ()
        if uncosted:
            # the cost model counts each custom call it cannot cost as -1 (seconds, flops, bytes):
            # taken back out, the figures are those of the rest of the program
            cost.update({key: cost[key] + len(uncosted) for key in ("optimal_seconds", "flops", "bytes accessed")
                         if cost.get(key) is not None})
        flops, bytes_accessed = _known(cost.get("flops")), _known(cost.get("bytes accessed"))
        seconds = _known(cost.get("optimal_seconds"))
        findings = _read_findings(hlo, flops, bytes_accessed, seconds, memory, name)
        return TpuCompileResult(
            name=name,
            topology=topo.name,
            generation=topo.generation,
            device_kind=reply["device_kind"],
            devices=count,
            chips=len({coords for _, coords, _ in devices[:count]}),
            libtpu_version=self._versions["libtpu"],
            jax_version=self._versions["jax"],
            compile_seconds=reply["compile_seconds"],
            kernels=parse_kernels(hlo).kernels if hlo else (),
            memory=memory,
            out_of_memory=reply["message"] if status == _worker.OUT_OF_MEMORY else None,
            flops=flops,
            transcendentals=_known(cost.get("transcendentals")),
            bytes_accessed=bytes_accessed,
            cost_model_seconds=seconds,
            hlo=hlo,
            uncosted=uncosted,
            findings=tuple(findings),
        )

    def _describe(self, topo: Topology) -> None:
        """Check once per session that libtpu builds ``topo``, for an error that lists names."""
        if topo.name in self._described:
            return
        reply = self._request({"op": "topology", "topology": topo.libtpu_name}, what=f"building topology {topo}")
        if reply["status"] != _worker.OK:
            raise UnknownTopologyError(
                f"libtpu {self._versions.get('libtpu', '?')} cannot build TPU topology {topo.name!r}: "
                f"{reply['message']}. Topologies it builds here: {', '.join(KNOWN_TOPOLOGIES)}."
            )
        self._described.add(topo.name)

    def _refusal(self, message: str, topo: Topology, name: str, graph_path: Path) -> TpuCompileError:
        shown = message
        if len(message) > _MESSAGE_CHARS:
            full = graph_path.with_name(graph_path.name + ".error.txt")
            full.write_text(message)
            shown = f"{message[:_MESSAGE_CHARS]}\n... ({len(message) - _MESSAGE_CHARS} more characters in {full})"
        hint = ""
        if _PALLAS_VERSION_REFUSAL in message:
            # jax 0.7.1 lowers Pallas TPU kernels to Mosaic IR version 8 off a TPU VM; libtpu
            # 0.0.20 and 0.0.21 (torch_xla[tpu] 2.9's) accept at most 7 in compile-only mode.
            hint = (
                "\nPallas TPU kernels lowered by jax 0.7.1 need libtpu >= 0.0.23 to compile here "
                f"(this worker has {self._versions.get('libtpu')}): {INSTALL_HINT}."
            )
        return TpuCompileError(
            f"XLA:TPU (libtpu {self._versions.get('libtpu')}, {topo}) refused graph {name!r}:\n{shown}\n"
            f"The graph is saved in {graph_path}.{hint}",
            xla_message=message,
            graph_path=str(graph_path),
        )

    def _directory(self) -> Path:
        if self._graph_dir is None:
            self._graph_dir = Path(tempfile.mkdtemp(prefix="xlabridge-tpu-"))
        self._graph_dir.mkdir(parents=True, exist_ok=True)
        return self._graph_dir

    def _graph_path(self, name: str, key: bytes, extension: str) -> Path:
        stem = re.sub(r"[^\w.-]+", "_", name)[:80] or "graph"
        return self._directory() / f"{stem}-{hashlib.sha1(key).hexdigest()[:12]}.{extension}"

    # -- the worker

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        env = dict(os.environ)
        # libtpu's start-up looks for the TPU VM it runs on; these name one and keep it quiet.
        env.setdefault(_env.TPU_ACCELERATOR_TYPE, "v5litepod-4")
        env.setdefault(_env.TPU_WORKER_HOSTNAMES, "localhost")
        # libtpu takes /tmp/libtpu_lockfile unless told not to; any process that initialised
        # JAX with libtpu installed may hold it, and the compile-only client needs no TPU.
        env[_env.ALLOW_MULTIPLE_LIBTPU_LOAD] = "1"
        # The worker's JAX needs no backend of its own (topology devices come from the plugin).
        env[_env.JAX_PLATFORMS] = "cpu"
        env[_env.PYTHONPATH] = os.pathsep.join(os.path.abspath(p) if p else os.getcwd() for p in sys.path)
        log = tempfile.NamedTemporaryFile(prefix="worker-", suffix=".log", dir=self._directory(), delete=False)
        self._log_path = log.name
        started = time.perf_counter()
        self._process = subprocess.Popen(
            [sys.executable, _worker.__file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env
        )
        log.close()
        hello = self._read_reply(self._process, "starting", None)
        if hello["status"] != _worker.OK:
            self._process.wait()
            raise TpuWorkerError(f"the TPU compile worker could not start:\n{hello['message']}")
        self._versions = {"libtpu": hello["libtpu"], "jax": hello["jax"]}
        logger.info("TPU compile worker started in %.1f s (libtpu %s)", time.perf_counter() - started, hello["libtpu"])
        return self._process

    def _request(self, message: dict[str, Any], *, what: str, graph_path: Path | None = None) -> dict[str, Any]:
        process = self._ensure_started()
        try:
            process.stdin.write(_worker.encode(message))
            process.stdin.flush()
        except BrokenPipeError:
            raise self._died(process, what, graph_path) from None
        return self._read_reply(process, what, graph_path)

    def _read_reply(self, process: subprocess.Popen[bytes], what: str, graph_path: Path | None) -> dict[str, Any]:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        header = self._read(process, _worker.header_size(), deadline, what, graph_path)
        payload = self._read(process, _worker.payload_size(header), deadline, what, graph_path)
        return pickle.loads(payload)

    def _read(
        self, process: subprocess.Popen[bytes], size: int, deadline: float | None, what: str, graph_path: Path | None
    ) -> bytes:
        fd = process.stdout.fileno()
        chunks, left = [], size
        while left:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                process.kill()
                process.wait()
                self._process = None
                where = f" The graph is saved in {graph_path}." if graph_path else ""
                raise TpuWorkerError(
                    f"the TPU compile worker did not finish {what} within {self._timeout} s and was "
                    f"stopped.{where}",
                    graph_path=str(graph_path) if graph_path else None,
                )
            chunk = os.read(fd, left)
            if not chunk:
                raise self._died(process, what, graph_path)
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _died(self, process: subprocess.Popen[bytes], what: str, graph_path: Path | None) -> TpuWorkerError:
        returncode = process.wait()
        self._process = None
        how = f"signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit status {returncode}"
        log = Path(self._log_path).read_text(errors="replace") if self._log_path else ""
        # glog writes a fatal line twice (to the log and to stderr); show each once.
        fatal = list(dict.fromkeys(line for line in log.splitlines() if _FATAL_LOG_LINE.search(line)))
        said = "\n".join(fatal[:5]) or log[-_MESSAGE_CHARS:]
        where = f"\nThe graph is saved in {graph_path}." if graph_path else ""
        return TpuWorkerError(
            f"the TPU compile worker (libtpu {self._versions.get('libtpu', '?')}) died ({how}) while {what}; "
            f"libtpu said:\n{said}{where}\nFull worker log: {self._log_path}",
            xla_message=said,
            graph_path=str(graph_path) if graph_path else None,
        )


def _read_findings(hlo: str, flops: float | None, bytes_accessed: float | None, seconds: float | None,
                   memory: HbmUsage | None, name: str) -> list[_findings.TpuFinding]:
    """The findings of a compiled program; none, with a warning in the log, where reading them fails
    (a program text this reader does not know must not cost the compile result)."""
    if not hlo:
        return []
    try:
        return _findings.read_findings(
            hlo, flops=flops, bytes_accessed=bytes_accessed, cost_model_seconds=seconds,
            hbm_bytes=memory.total_bytes if memory else None, capacity_bytes=memory.capacity_bytes if memory else None,
        )
    except Exception:  # noqa: BLE001 - a reader's failure leaves the result without findings
        logger.warning("could not read the TPU findings of graph %r", name, exc_info=True)
        return []


def _known(value: float | None) -> float | None:
    """A cost figure, or None where XLA's cost model had none (missing or negative: see result.py)."""
    return None if value is None or value < 0 else float(value)


def _function_reference(fn: Callable[..., Any] | str) -> bytes | str:
    if isinstance(fn, str):
        if ":" not in fn:
            raise ValueError(f"fn as a string must be 'package.module:function', got {fn!r}")
        return fn
    if not callable(fn):
        raise TypeError(f"fn must be a function or a 'package.module:function' string, got {type(fn).__name__}")
    inner = fn.func if isinstance(fn, functools.partial) else fn
    problem = None
    if getattr(inner, "__module__", None) == "__main__":
        problem = "it is defined in __main__, which the worker does not run"
    else:
        try:
            return pickle.dumps(fn)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            problem = str(error)
    raise ValueError(
        f"compile_jax lowers fn in the TPU worker process, so fn must be importable there: a "
        f"module-level function, a functools.partial of one, or a 'package.module:function' string. "
        f"{fn!r} is not ({problem})."
    )


def _function_name(fn: Callable[..., Any] | str) -> str:
    if isinstance(fn, str):
        return fn.rpartition(":")[2]
    inner = fn.func if isinstance(fn, functools.partial) else fn
    return getattr(inner, "__name__", "fn")


def _arg_spec(position: int, arg: Any) -> tuple[tuple[int, ...], str]:
    try:
        return tuple(int(d) for d in arg.shape), np.dtype(arg.dtype).name
    except (AttributeError, TypeError) as error:
        raise TypeError(
            f"argument {position} must be a jax.ShapeDtypeStruct (a shape and a NumPy dtype), got {arg!r} ({error})"
        ) from None


def _mesh_axes(mesh: Mapping[str, int] | None) -> list[tuple[str, int]] | None:
    if mesh is None:
        return None
    axes = list(dict(mesh).items())
    if not axes or any(not isinstance(n, str) or not isinstance(s, int) or s < 1 for n, s in axes):
        raise ValueError(f"mesh must map axis names to positive sizes, such as {{'x': 4}}, got {mesh!r}")
    return axes


def compile_hlo_proto(proto: bytes, target: str | Topology = DEFAULT_TARGET, **options: Any) -> TpuCompileResult:
    """One compile in a worker of its own (``TpuCompiler(target).compile_hlo_proto``)."""
    with TpuCompiler(target) as compiler:
        return compiler.compile_hlo_proto(proto, **options)


def compile_stablehlo(module: str | bytes, target: str | Topology = DEFAULT_TARGET, **options: Any) -> TpuCompileResult:
    """One compile in a worker of its own (``TpuCompiler(target).compile_stablehlo``)."""
    with TpuCompiler(target) as compiler:
        return compiler.compile_stablehlo(module, **options)


def compile_tensors(tensors: Any, target: str | Topology = DEFAULT_TARGET, **options: Any) -> TpuCompileResult:
    """One compile in a worker of its own (``TpuCompiler(target).compile_tensors``)."""
    with TpuCompiler(target) as compiler:
        return compiler.compile_tensors(tensors, **options)


def compile_jax(
    fn: Callable[..., Any] | str, *args: Any, target: str | Topology = DEFAULT_TARGET, **options: Any
) -> TpuCompileResult:
    """One compile in a worker of its own (``TpuCompiler(target).compile_jax``)."""
    with TpuCompiler(target) as compiler:
        return compiler.compile_jax(fn, *args, **options)

