"""A Dynamo graph as the programs a TPU would compile: forward and backward as AOTAutograd gives them.

Whatever backend a graph was handed to (inductor, eager, aot_eager...), what a TPU compiler
would receive from it is what AOTAutograd makes of it: for an inference call one graph, for a
training call (grad mode on, an input requiring grad) a forward and a backward graph, partitioned
as TorchTPU and inductor partition them (``min_cut_rematerialization_partition``). ``trace_programs``
traces that here on fake tensors built from the inputs' metadata (nothing runs, no memory is
taken), after the user's run, with torch's decompositions of the ops torchax does not lower
(``_fx.decompositions_for_tpu``) and attention in its math form (the CPU's or CUDA's flash
kernels have no TPU lowering; on a TPU the compiler picks its own attention kernel).

``training_step`` joins a forward and its backward into one program (its inputs: the forward's
and the tangents; its outputs: the forward's and the gradients): the step whose per-chip HBM
decides which slice fits, compiled with the batch sharded over N chips (``batch_inputs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from xlabridge._upstream import torch as upstream_torch

__all__ = ["FxProgram", "TensorMeta", "trace_programs", "training_step"]


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """What is kept of one input of a Dynamo graph during the run: no data, only its metadata."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    requires_grad: bool = False
    parameter: bool = False
    """An ``nn.Parameter`` (replicated across chips under data parallelism)."""

    @classmethod
    def of(cls, value: Any) -> TensorMeta | int | None:
        """The metadata of one example input: a tensor's, an int's value, None for anything else."""
        if isinstance(value, torch.Tensor):
            return cls(tuple(_hint(d) for d in value.shape), value.dtype, bool(value.requires_grad),
                       isinstance(value, torch.nn.Parameter))
        if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
            return _hint(value)
        return None


def _hint(value: int | torch.SymInt) -> int:
    """The value of a size, a symbolic one's hint: ``int()`` of a symbol would add a guard to the graph
    being compiled (specializing it), which observing must not do."""
    if not isinstance(value, torch.SymInt):
        return int(value)
    from torch.fx.experimental import symbolic_shapes

    hint = getattr(symbolic_shapes, "guarding_hint_or_throw", None) or symbolic_shapes.hint_int  # torch 2.15 / 2.9
    return int(hint(value))


@dataclasses.dataclass
class FxProgram:
    """One ATen graph a TPU would compile, with each input's ``(shape, dtype)`` (or int)."""

    role: str
    """``inference``, ``forward`` or ``backward``."""
    graph_module: torch.fx.GraphModule
    input_specs: list[Any]
    batch_inputs: list[int] = dataclasses.field(default_factory=list)
    """Tensor inputs (positions among the tensor inputs) that carry the batch as their first dimension."""


def _spec(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (tuple(int(d) for d in value.shape), value.dtype)
    return int(value)


def _placeholder_specs(gm: torch.fx.GraphModule) -> list[Any]:
    return [_spec(node.meta["val"]) for node in gm.graph.nodes if node.op == "placeholder"]


def batch_size(inputs: Sequence[TensorMeta | int | None]) -> int | None:
    """The batch: the most common first dimension of the non-parameter tensor inputs."""
    sizes = [i.shape[0] for i in inputs if isinstance(i, TensorMeta) and not i.parameter and i.shape]
    return max(set(sizes), key=sizes.count) if sizes else None


def trace_programs(gm: torch.fx.GraphModule, inputs: Sequence[TensorMeta | int | None], *, training: bool) -> list[FxProgram]:
    """The programs AOTAutograd makes of Dynamo graph ``gm`` on inputs of ``inputs``' metadata.

    ``training``: whether the call ran with grad mode on (then inputs that required grad get
    gradients, and a forward and a backward program come out; without any, one inference program).
    Raises what tracing raises (an input with no metadata is a ``ValueError``).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from xlabridge.tpu import _fx

    if any(i is None for i in inputs):
        raise ValueError("the graph has an input that is neither a tensor nor an int: it is not traced for TPU")
    fake_mode = upstream_torch.fake_tensor_mode(allow_non_fake_inputs=True)
    with fake_mode:
        args = [torch.empty(i.shape, dtype=i.dtype, requires_grad=i.requires_grad and training)
                if isinstance(i, TensorMeta) else i for i in inputs]
    training = training and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    programs: list[FxProgram] = []

    def keep(role: str):
        def compiler(graph: torch.fx.GraphModule, _example_inputs: Any) -> Any:
            programs.append(FxProgram(role, graph, _placeholder_specs(graph)))
            return upstream_torch.boxed_nop(graph)
        return compiler

    graph = _on_cpu(_fx.on_one_device(gm))
    with upstream_torch.eager_backward_compile(), sdpa_kernel([SDPBackend.MATH]), torch.set_grad_enabled(training):
        upstream_torch.aot_module_simplified(
            graph, args, fw_compiler=keep("forward"), bw_compiler=keep("backward"),
            inference_compiler=keep("inference"), partition_fn=upstream_torch.min_cut_partition(),
            decompositions=_fx.decompositions_for_tpu(),
        )
    batch = batch_size(inputs)
    for program in programs:
        program.batch_inputs = _batch_inputs(program, inputs, batch)
    return programs


def _on_cpu(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with every device it names positionally (``x.to(device)``) the CPU's: its inputs are
    traced as fake CPU tensors, whatever device the run used (CUDA, meta)."""
    cpu = torch.device("cpu")

    def replace(value: Any) -> Any:
        if isinstance(value, torch.device):
            return cpu
        if isinstance(value, (list, tuple)):
            return type(value)(replace(v) for v in value)
        return value

    for node in gm.graph.nodes:
        node.args = replace(node.args)
        node.kwargs = {k: replace(v) for k, v in node.kwargs.items()}
    gm.recompile()
    return gm


def _batch_inputs(program: FxProgram, inputs: Sequence[TensorMeta | int | None], batch: int | None) -> list[int]:
    """Positions (among tensor inputs) of the inputs sharded under data parallelism: the user's data
    (not parameters) and, for a backward program, saved activations and tangents, whose first dimension
    is the batch."""
    if not batch:
        return []
    tensors = [spec for spec in program.input_specs if not isinstance(spec, int)]
    parameters = {i for i, meta in enumerate(m for m in inputs if not isinstance(m, int))
                  if isinstance(meta, TensorMeta) and meta.parameter}
    out = []
    for position, (shape, _dtype) in enumerate(tensors):
        if program.role != "backward" and position in parameters:
            continue
        if shape and shape[0] == batch:
            out.append(position)
    return out


def training_step(forward: FxProgram, backward: FxProgram) -> FxProgram:
    """One graph running ``forward`` then ``backward``: its inputs the forward's, then the tangents;
    its outputs the forward's user outputs, then the gradients (role ``training-step``)."""
    graph = torch.fx.Graph()
    constants: dict[str, Any] = {}
    specs: list[Any] = []
    batch: list[int] = []

    def add_input(node: torch.fx.Node, spec: Any, is_batch: bool) -> torch.fx.Node:
        made = graph.placeholder(node.name)
        made.meta = dict(node.meta)
        if not isinstance(spec, int):
            if is_batch:
                batch.append(sum(not isinstance(s, int) for s in specs))
        specs.append(spec)
        return made

    def copy_body(program: FxProgram, env: dict[torch.fx.Node, Any], prefix: str) -> None:
        for node in program.graph_module.graph.nodes:
            if node.op == "get_attr":
                name = f"{prefix}{node.target}"
                constants[name] = _attribute(program.graph_module, str(node.target))
                env[node] = graph.get_attr(name)
                env[node].meta = dict(node.meta)
            elif node.op not in ("placeholder", "output"):
                env[node] = graph.node_copy(node, lambda n: env[n])

    def inputs(program: FxProgram) -> list[tuple[torch.fx.Node, Any, bool]]:
        placeholders = [n for n in program.graph_module.graph.nodes if n.op == "placeholder"]
        out, tensors = [], 0
        for node, spec in zip(placeholders, program.input_specs):
            out.append((node, spec, not isinstance(spec, int) and tensors in program.batch_inputs))
            tensors += not isinstance(spec, int)
        return out

    env: dict[torch.fx.Node, Any] = {}
    for node, spec, is_batch in inputs(forward):
        env[node] = add_input(node, spec, is_batch)
    copy_body(forward, env, "fw_")
    fw_outputs = list(_output(forward.graph_module))
    bw_inputs = inputs(backward)
    saved_count = sum(not n.name.startswith("tangents") for n, _, _ in bw_inputs)
    user_count = len(fw_outputs) - saved_count
    saved = {n.name: env[n] for n in fw_outputs[user_count:] if isinstance(n, torch.fx.Node)}
    bw_env: dict[torch.fx.Node, Any] = {}
    for node, spec, is_batch in bw_inputs:
        bw_env[node] = saved[node.name] if node.name in saved else add_input(node, spec, is_batch)
    copy_body(backward, bw_env, "bw_")
    results = [env[n] if isinstance(n, torch.fx.Node) else n for n in fw_outputs[:user_count]]
    results += [bw_env[n] if isinstance(n, torch.fx.Node) else n for n in _output(backward.graph_module)]
    graph.output(tuple(results))
    return FxProgram("training-step", torch.fx.GraphModule(constants, graph), specs, batch)


def _output(gm: torch.fx.GraphModule) -> Sequence[Any]:
    node = next(n for n in gm.graph.nodes if n.op == "output")
    return node.args[0] if isinstance(node.args[0], (tuple, list)) else [node.args[0]]


def _attribute(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value
