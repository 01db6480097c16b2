"""TorchTPU's compiler, one instance at a time: the seam that the ``torchtpu.compiler`` probe
(``torchtpu.py``) and ``xlabridge.torchtpu.GraphCapture`` share.

``observe_compiler`` has the base compiler of a ``SplitCompiler`` (a ``StaticCompiler``, or a
``DynamicCompiler`` for a graph with dynamic shapes) tell a listener each program it compiles
(``Partition``); without a TPU, the stand-in runs each on the CPU in its place
(``stand_in_patches``, ``with_math_attention``; see ``torchtpu.py``). Checked on torch_tpu 0.2.0
with torch 2.15.0.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from xlabridge import _env
from xlabridge._upstream import torch_tpu as upstream_tpu

InputSpec = tuple[tuple[int, ...], torch.dtype] | int
"""A program input: a tensor's shape and dtype, or an int argument's value (``input_specs``)."""


@dataclasses.dataclass
class Partition:
    """One program TorchTPU compiles: a partition of a forward or backward graph as its split
    compiler hands it to the ``StaticCompiler`` (``fx_to_mlir`` receives it so), or, for a graph
    with dynamic shapes, one bucket's program as the ``DynamicCompiler`` prepares it."""

    kind: str
    """``forward`` or ``backward``."""
    module_name: str | None
    """TorchTPU's MLIR module name (``graph0_split0_fwd_submod_0``)."""
    graph_module: torch.fx.GraphModule
    input_specs: list[InputSpec]
    collectives: list[torch.fx.Node]
    """Its collective nodes (the split compiler gives each collective a partition of its own)."""
    seconds: float
    """Time in ``StaticCompiler.__call__``: FX passes, lowering and compile (with the stand-in: passes only)."""
    stand_in: bool
    """Run on CPU in place of the TPU program (no TPU here)."""
    bucket: int = 0
    """A graph with dynamic shapes: which of its bucket programs (each compiled at its bucket's bound)."""
    bounds: str = ""
    """A graph with dynamic shapes: the bucket's bounds of its symbols (``s33 in [2, 128]``)."""

    def ops(self) -> list[str]:
        return [op_name(node) for node in self.graph_module.graph.nodes if node.op == "call_function"]

    def digest(self) -> str:
        """A content hash: the graph's code and its inputs' shapes and dtypes."""
        text = self.graph_module.code + repr([s if isinstance(s, int) else (list(s[0]), str(s[1]))
                                              for s in self.input_specs])
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def op_name(node: torch.fx.Node) -> str:
    target = node.target
    name = getattr(target, "name", None)
    return str(name() if callable(name) else getattr(target, "__name__", target))


def input_specs(inputs: Sequence[Any], *, ints: bool = False) -> list[InputSpec]:
    """Each input's shape and dtype; ``NotImplementedError`` for a symbolic size (dynamic shapes).

    ``ints``: a Python int input stays an int (a dynamic graph's bucket program takes its symbols'
    values as arguments, fixed at the bucket's bound)."""
    specs: list[InputSpec] = []
    for position, value in enumerate(inputs):
        if ints and type(value) is int:
            specs.append(value)
            continue
        if not isinstance(value, torch.Tensor):
            raise NotImplementedError(
                f"input {position} is a {type(value).__name__}, not a tensor: symbolic shapes are not captured "
                "(TorchTPU compiles with dynamic=False by default)")
        specs.append((tuple(int(size) for size in value.shape), value.dtype))
    return specs


@functools.cache
def tpu_present() -> bool:
    """Whether torch_tpu finds a TPU on this machine (its PCI probe; no device is started)."""
    return bool(upstream_tpu.tpu_device_count())


def skip_tpu_metadata_query() -> bool:
    """Where torch_tpu finds no TPU, tell libtpu not to query the GCE metadata server (``_env``).

    Returns whether it was set here. Off a TPU VM, libtpu's PJRT client, which TorchTPU starts
    at the first ``backward()`` of the process (the autograd engine asks its device guard for a
    device count), retries that server for minutes before giving up (docs/guides/torchtpu.md).
    """
    if _env.get(_env.TPU_SKIP_MDS_QUERY) is not None or tpu_present():
        return False
    _env.put(_env.TPU_SKIP_MDS_QUERY, "1")
    return True


def stand_in() -> bool:
    """Whether TorchTPU's programs run on CPU in their place while observed: no TPU here."""
    return not tpu_present()


Listener = Callable[[Callable[[], Partition]], None]
"""Told of each partition compiled, with a function that makes its record (which may raise: a
symbolic input size), so that each listener decides what a failure means to it."""


def observe_compiler(split: Any, listener: Listener, *, run_on_cpu: bool) -> bool:
    """Have the base compiler of ``split`` (a ``SplitCompiler``) tell ``listener`` each partition.

    Per instance, so a backward graph compiled later (at the first ``backward()``) is observed
    too. A ``StaticCompiler`` tells each partition it compiles; ``run_on_cpu``: its ``_compile``
    runs the partition on CPU instead of lowering it. A ``DynamicCompiler`` (a graph with dynamic
    shapes) tells each bucket program it prepares (``_observed_dynamic_call``). Returns False for
    another compiler.
    """
    base = getattr(split, "base_compiler", None)
    dynamic = isinstance(base, upstream_tpu.dynamic_compiler())
    if not dynamic and not isinstance(base, upstream_tpu.static_compiler()):
        return False
    listeners: list[Listener] = base.__dict__.get("_xlabridge_listeners", [])
    if not listeners:
        base._xlabridge_listeners = listeners
        base._xlabridge_on_cpu = run_on_cpu
        # the split compiler calls it by attribute: the instance's wins
        base.__call__ = (_observed_dynamic_call if dynamic else _observed_static_call)(base, base.__call__)
        if run_on_cpu and not dynamic:
            base._compile = _run_on_cpu
    elif run_on_cpu and not base._xlabridge_on_cpu:
        base._xlabridge_on_cpu = True
        if not dynamic:
            base._compile = _run_on_cpu
    listeners.append(listener)
    return True


def _observed_static_call(base: Any, original_call: Any) -> Callable[..., Any]:
    """``StaticCompiler.__call__`` of ``base``, timed, telling its listeners the partition."""
    signature = inspect.signature(original_call)

    def __call__(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = original_call(*args, **kwargs)
        seconds = time.perf_counter() - started
        on_cpu = base._xlabridge_on_cpu

        @functools.cache
        def record() -> Partition:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            gm, inputs = bound.arguments["graph_module"], bound.arguments["example_inputs"]
            return Partition(
                "forward" if bound.arguments["is_fwd"] else "backward", bound.arguments["module_name"], gm,
                input_specs(inputs), [n for n in gm.graph.nodes if _is_collective(n)], seconds, on_cpu,
            )

        for each in list(base._xlabridge_listeners):
            each(record)
        return result

    return __call__


def _observed_dynamic_call(base: Any, original_call: Any) -> Callable[..., Any]:
    """``DynamicCompiler.__call__`` of ``base``: its listeners are told one partition per bucket.

    TorchTPU compiles a graph with dynamic shapes once per bucket of its symbols' values
    (``num_dynamic_buckets``, 1 by default, at multiples of ``bucket_size``), each program at the
    bucket's upper bound, its dynamic inputs padded in the graph (``tpu._pad_real_to_static``).
    The executable it returns holds each bucket's rewritten graph and bounded inputs
    (``_bucket_specs``): what its ``StaticCompiler`` compiles at the graph's first call on a TPU,
    recorded here at once. With ``run_on_cpu`` the graph as AOTAutograd gave it (copied before
    TorchTPU rewrites it) runs on the CPU in place of that executable, which refuses CPU tensors.
    """
    signature = inspect.signature(original_call)

    def __call__(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:  # a call this seam does not know (install() reports the probe unavailable)
            return original_call(*args, **kwargs)
        bound.apply_defaults()
        on_cpu = base._xlabridge_on_cpu
        runnable = copy.deepcopy(bound.arguments["graph_module"]) if on_cpu else None
        started = time.perf_counter()
        result = original_call(*args, **kwargs)
        seconds = time.perf_counter() - started
        kind = "forward" if bound.arguments["is_fwd"] else "backward"
        for number, spec in enumerate(upstream_tpu.bucket_specs(result)):

            @functools.cache
            def record(spec: Any = spec, number: int = number) -> Partition:
                gm = spec.graph_module
                return Partition(
                    kind, bound.arguments["module_name"], gm, input_specs(spec.bounded_model_inputs, ints=True),
                    [n for n in gm.graph.nodes if _is_collective(n)], seconds if number == 0 else 0.0, on_cpu,
                    bucket=number, bounds=_bounds_text(spec.symbol_bounds),
                )

            for each in list(base._xlabridge_listeners):
                each(record)
        return _run_on_cpu(runnable, ()) if on_cpu else result

    return __call__


def _bounds_text(bounds: Any) -> str:
    """A bucket's ``SymbolBounds`` as ``s33 in [2, 128]``."""
    ranges = bounds.symbol_ranges
    ranges = ranges() if callable(ranges) else ranges
    return ", ".join(f"{symbol} in [{value.lower}, {value.upper}]"
                     for symbol, value in sorted(ranges.items(), key=lambda item: str(item[0])))


def _is_collective(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and upstream_tpu.is_collective_op(
        getattr(node.target, "overloadpacket", node.target))


def _run_on_cpu(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
    """``StaticCompiler._compile``'s stand-in: the partition, run eagerly on the CPU."""

    def run(*inputs: Any) -> Any:
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        return graph_module(*inputs)

    return run


def with_math_attention(original: Any) -> Any:
    """``TpuBackend.__call__`` with the stand-in: attention traced in its math form.

    On CPU, AOTAutograd would trace ``scaled_dot_product_attention`` to the CPU flash kernel
    (``_scaled_dot_product_flash_attention_for_cpu`` and its backward), an op no TPU lowering
    knows; on a TPU, TorchTPU picks its own attention kernel.
    """

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            return original(self, *args, **kwargs)

    return __call__


def keep_constants(gm_or_graph: Any) -> None:
    """``mark_embedded_constants.apply`` with the stand-in: the constants stay CPU tensors."""


@contextlib.contextmanager
def stand_in_patches() -> Iterator[None]:
    """For the duration: ``mark_embedded_constants`` skipped (see the module's docstring)."""
    mark_embedded_constants = upstream_tpu.embedded_constants_pass()
    original = mark_embedded_constants.apply
    mark_embedded_constants.apply = keep_constants
    try:
        yield
    finally:
        mark_embedded_constants.apply = original
