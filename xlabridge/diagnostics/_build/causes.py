"""The one table of known causes: what splits a model, what a collective costs, how to name each
and how to fix it.

To teach xlabridge a new cause, add a row. Dynamo causes are matched against Dynamo's
break reason (a regular expression on its text); HLO causes by the aten op name of the
node that ran outside XLA; recompile causes against the failed guard Dynamo names;
collective causes by a predicate on the collective and its partitioned graph. The first
matching row wins; the last row of each table catches all. Causes are applied when a report
is built from its events, so a newer table re-reads an older log.

The collectives' table, matched by predicates on a collective and its partitioned graph, is
``collective_causes``.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Cause:
    """A known reason for a split, with the category it is reported under and a fix."""

    category: str
    pattern: str
    suggestion: str

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text, flags=re.IGNORECASE) is not None


DYNAMO_CAUSES: tuple[Cause, ...] = (
    Cause(
        "data-dependent-branch",
        r"generic_jump|data-dependent branching|jump.*TensorVariable",
        "A Python `if`/`while` on a tensor's value stops capture. Compute both sides and pick "
        "with `torch.where(cond, a, b)`, or use `torch.cond` for branches with different work.",
    ),
    Cause(
        "tensor-item",
        r"Tensor\.item\(\)|\.item\(\)|_local_scalar_dense|Tensor\.tolist",
        "`.item()`/`.tolist()` pulls a value to the host. Keep it a 0-dim tensor and use it in "
        "tensor ops (`torch.where`, multiplication) instead of Python control flow.",
    ),
    Cause(
        "print-or-logging",
        r"`print`|builtin operator `print`|logging|logger",
        "Move `print`/logging out of the compiled function (log after the step, outside "
        "`torch.compile`), or allow it with `torch._dynamo.config.reorderable_logging_functions`.",
    ),
    Cause(
        "deepcopy",
        r"copy\.deepcopy",
        "`copy.deepcopy` is not traced: copy outside the compiled region, or use "
        "`tensor.clone()` for tensors.",
    ),
    Cause(
        "dynamic-shape-op",
        r"dynamic shape operator|nonzero|masked_select|unique|repeat_interleave",
        "The output shape depends on data. Use a static-shape form: `torch.where(mask, x, 0)` "
        "instead of boolean indexing, `torch.nonzero_static(x, size=N)` instead of `nonzero`.",
    ),
    Cause(
        "unsupported-builtin",
        r"builtin|unsupported method|unsupported call|Failed to trace",
        "Dynamo cannot trace this Python call. Move it out of the compiled function, or "
        "replace it with a torch equivalent.",
    ),
    Cause(
        "other",
        r".",
        "Dynamo stopped capturing here. Run with TORCH_LOGS=graph_breaks for the full "
        "context, and move the construct out of the compiled function if you can.",
    ),
)

def _fix(category: str) -> str:
    """The fix of a ``DYNAMO_CAUSES`` row: a break is fixed the same way whether its code or its text named it."""
    return next(cause.suggestion for cause in DYNAMO_CAUSES if cause.category == category)


@dataclasses.dataclass(frozen=True)
class GraphBreakCause:
    """A category of graph breaks by torch's own codes for them (``GB0124``), with a fix.

    ``codes`` maps each code to the break type torch's registry gives it (``graph_break_registry.json``,
    shipped with torch 2.8 and later; a code keeps its meaning across releases, newer releases add
    codes), so that a test can hold the table against the registry. ``construct`` narrows a code that
    covers many constructs (``GB0059``: any builtin) to the one torch names in its explanation
    (``builtin operator `print```); empty: the whole code."""

    category: str
    codes: dict[str, str]
    suggestion: str
    construct: str = ""

    def matches(self, code: str, reason: str) -> bool:
        if code not in self.codes:
            return False
        return not self.construct or re.search(self.construct, reason) is not None


GRAPH_BREAK_CAUSES: tuple[GraphBreakCause, ...] = (
    GraphBreakCause(
        "print-or-logging",
        {"GB0059": "Failed to trace builtin operator"},
        _fix("print-or-logging"),
        construct=r"builtin operator `print`",
    ),
    GraphBreakCause(
        "print-or-logging",
        {"GB0291": "logging.Logger method not supported for non-export cases"},
        _fix("print-or-logging"),
    ),
    GraphBreakCause(
        "data-dependent-branch",
        {"GB0170": "Data-dependent branching", "GB0035": "Data-dependent branching with non-constant __bool__",
         "GB0034": "Data-dependent assertion failed (cannot compile partial graph)"},
        _fix("data-dependent-branch"),
    ),
    GraphBreakCause(
        "tensor-item",
        {"GB0124": "Unsupported Tensor.item() call with capture_scalar_outputs=False",
         "GB0109": "Tensor.tolist() with non-integer tensor"},
        _fix("tensor-item"),
    ),
    GraphBreakCause(
        "deepcopy",
        {"GB0179": "copy.deepcopy()", "GB4198": "Attempted to copy.deepcopy a tensor"},
        _fix("deepcopy"),
    ),
    GraphBreakCause(
        "dynamic-shape-op",
        {"GB0036": "Dynamic shape operator", "GB0037": "Dynamic shape operator (no meta kernel)",
         "GB0033": "Data dependent operator",
         "GB0246": "Attempted to use `torch.nn.functional.one_hot` with data-dependent output shape"},
        _fix("dynamic-shape-op"),
    ),
    GraphBreakCause(
        "skipped-function",
        {"GB0007": "Attempted to call function marked as skipped",
         "GB0008": "Attempted to inline function marked as skipped",
         "GB0009": "Attempted to inline function marked as skipped (SkipFunctionVariable)",
         "GB0098": "Skip calling `torch.compiler.disable()`d function",
         "GB0099": "Skip inlining `torch.compiler.disable()`d function"},
        "Dynamo does not trace this function on purpose (torch marks it skipped, or it is "
        "`torch.compiler.disable`d): it runs eagerly between two graphs. Call it outside the compiled "
        "function, or compile the code it calls on its own.",
    ),
    GraphBreakCause(
        "unsupported-call",
        {"GB0156": "Unsupported method call", "GB0289": "unsupported method call on `typing` variable"},
        "Dynamo cannot trace a method of this object (a C++ binding, or a class it has no rules for): "
        "the call runs eagerly between two graphs. Call it outside the compiled function, or keep the "
        "object out of the traced code.",
    ),
    GraphBreakCause(
        "unsupported-builtin",
        {"GB0059": "Failed to trace builtin operator", "GB0213": "unimplemented builtin op on tensor arguments",
         "GB0193": "invalid call to builtin op handler", "GB0174": "bad args to builtin cast()"},
        _fix("unsupported-builtin"),
    ),
    GraphBreakCause(
        "hooks",
        {"GB0029": "Compilation of intermediate hooks requires compiled autograd",
         "GB0083": "Module-level backwards hooks require compiled autograd.",
         "GB0100": "Storing Tensor hook handle in globals",
         "GB0101": "Storing Tensor hook handle in globals (inline call)"},
        "A backward hook cannot be compiled into the graph: register it outside the compiled function, "
        "or turn on compiled autograd (`torch._dynamo.config.compiled_autograd = True`), which traces "
        "the backward with its hooks.",
    ),
    GraphBreakCause(
        "collective",
        {"GB0172": "async_op=True for distributed collectives",
         "GB0210": "torch.distributed package is not available!"},
        "A torch.distributed collective Dynamo cannot put in a graph: call it with `async_op=False`, use "
        "the functional collectives (`torch.distributed._functional_collectives`) inside compiled code, "
        "or call it outside the compiled function.",
    ),
)
"""Graph breaks by torch's code; the first matching row wins. A code no row names is ``other``, its fix
torch's own hints (``GRAPH_BREAK_OTHER``)."""

GRAPH_BREAK_OTHER = GraphBreakCause(
    "other", {},
    "Dynamo cannot trace this construct: torch's explanation and hints (its page for the code) say what "
    "would let it; otherwise move it out of the compiled function.",
)


def classify_graph_break(code: str, reason: str) -> Cause:
    """The cause of a break torch named the code of (``GB0156``): the first ``GRAPH_BREAK_CAUSES`` row
    with the code, else ``other``; a break without a code (a log of torch before 2.8, a reason only
    the backend was handed) by its text, ``DYNAMO_CAUSES``."""
    if not code:
        return classify_dynamo_break(reason)
    row = next((row for row in GRAPH_BREAK_CAUSES if row.matches(code, reason)), GRAPH_BREAK_OTHER)
    return Cause(row.category, r".", row.suggestion)


@dataclasses.dataclass(frozen=True)
class LibraryCause:
    """Where a graph break inside a library (torch's own code, an installed package) comes from, and
    the advice that fits there: the library's code is not the user's to change.

    ``path`` is matched against the break's innermost library frame, as a path inside its package
    (``torch/nn/parallel/distributed.py``)."""

    name: str
    path: str
    expected: bool
    """torch breaks there by design whatever the user's code (DDP's forward under ``torch.compile``)."""
    suggestion: str

    def matches(self, path: str) -> bool:
        return re.search(self.path, path.replace("\\", "/")) is not None


LIBRARY_CAUSES: tuple[LibraryCause, ...] = (
    LibraryCause(
        "DDP's forward", r"(^|/)torch/nn/parallel/distributed\.py$", True,
        "Expected: `torch.compile` of a DDP model breaks in DDP's own forward (its C++ logger, context "
        "managers Dynamo skips on purpose) and compiles your module's forward as a graph of its own. "
        "Nothing to change in your code.",
    ),
    LibraryCause(
        "FSDP's hooks", r"(^|/)torch/distributed/(fsdp|_composable)/", True,
        "Expected where a model sharded with FSDP is compiled whole: FSDP's hooks (all-gathers and "
        "resharding around each sharded module) run eagerly. Compile each sharded block instead "
        "(`block.compile()` or `torch.compile(block)` per block, then `fully_shard`), FSDP2's recipe: "
        "its hooks then run between compiled blocks.",
    ),
    LibraryCause(
        "torch.distributed", r"(^|/)torch/distributed/", False,
        "A torch.distributed call inside the compiled region: Dynamo traces functional collectives "
        "only. Call the collective outside the compiled function, or use "
        "`torch.distributed._functional_collectives` inside it.",
    ),
    LibraryCause(
        "torch", r"(^|/)(torch|torch_xla|functorch)/", False,
        "Inside torch's own code, reached from this line: the construct Dynamo cannot trace is torch's, "
        "not yours (torch's hints say what would let it). Compile the module or function inside it that "
        "does the work, or accept the break: it costs a graph boundary, not a fix in your code.",
    ),
    LibraryCause(
        "a library", r".", False,
        "Inside an installed library's code, reached from this line: its construct, not yours, stops "
        "Dynamo (torch's hints say which). Compile the library's inner module that does the work (the "
        "model without its wrapper), or check for a release of the library that supports torch.compile.",
    ),
)
"""Graph breaks inside a library, by the library frame; the first matching row wins."""


def library_path(package: str, filename: str) -> str:
    """``filename`` from its package's directory on (``torch/nn/parallel/distributed.py``)."""
    parts = filename.replace("\\", "/").split("/")
    return "/".join(parts[len(parts) - 1 - parts[::-1].index(package):]) if package in parts else filename


def classify_library(package: str, filename: str) -> LibraryCause:
    """The ``LIBRARY_CAUSES`` row of a break whose innermost library frame is ``filename`` of ``package``."""
    path = library_path(package, filename)
    return next(cause for cause in LIBRARY_CAUSES if cause.matches(path))


HLO_CAUSES: tuple[Cause, ...] = (
    Cause(
        "cpu-fallback",
        r"^aten::exp2$",
        "`torch.exp2(x)` has no XLA lowering here; `torch.pow(2.0, x)` (or "
        "`torch.exp(x * math.log(2.0))`) lowers to XLA and keeps the graph whole.",
    ),
    Cause(
        "cpu-fallback",
        r"^aten::(nonzero|masked_select|unique.*)$",
        "A data-dependent shape cannot live in a static XLA graph. Use `torch.where` with a "
        "mask, or `torch.nonzero_static(x, size=N)`.",
    ),
    Cause(
        "host-transfer",
        r"^aten::(_local_scalar_dense|_to_copy|to|cpu|_to_cpu|item)$",
        "A value is moved to the host inside the graph. Keep it on the XLA device; move "
        "results to the CPU after `torch_xla.sync()`.",
    ),
    Cause(
        "cpu-fallback",
        r".",
        "This op has no XLA lowering in this torch_xla and runs on the CPU, cutting the XLA "
        "graph in two with a transfer each way. Rewrite it with ops that lower, or ask "
        "torch_xla for a lowering.",
    ),
)


TPU_CAUSES: tuple[Cause, ...] = (
    Cause(
        "no-tpu-lowering",
        r"^aten::adaptive_max_pool[123]d(_backward)?$",
        "Adaptive max pooling has no TPU lowering here. Where the input's size is a multiple of the "
        "output's, it is a plain max pool: `F.max_pool2d(x, kernel_size=(H // oh, W // ow))`, which "
        "lowers (and so does its backward); or pool with `nn.AdaptiveAvgPool2d`.",
    ),
    Cause(
        "no-tpu-lowering",
        r"^aten::_?embedding_bag(_backward|_dense_backward|_sparse_backward)?$",
        "`nn.EmbeddingBag` has no TPU lowering here. Look the rows up with `nn.Embedding` (or "
        "`F.embedding`) and reduce over the bag dimension (`.sum(1)` / `.mean(1)`, a mask for ragged bags).",
    ),
    Cause(
        "no-tpu-lowering",
        r"^aten::_cdist_(forward|backward)$",
        "`torch.cdist` (its backward) has no TPU lowering here. Compute the distances from matmuls: "
        "`(x.pow(2).sum(-1, keepdim=True) - 2 * x @ y.mT + y.pow(2).sum(-1).unsqueeze(-2)).clamp_min(0).sqrt()`.",
    ),
    Cause(
        "no-tpu-lowering",
        r"^aten::(histc|histogram.*|bincount)$",
        "Histograms have no TPU lowering here. Count with a one-hot sum over fixed bins "
        "(`F.one_hot(bucketize(x, edges), bins).sum(0)`), or compute them on the host after the step.",
    ),
    Cause(
        "no-tpu-lowering",
        r"^aten::(poisson|binomial|_standard_gamma|_sample_dirichlet|exponential|cauchy|geometric|log_normal)$",
        "This random sampler has no TPU lowering here. Sample from uniform or normal draws "
        "(`torch.rand`/`torch.randn` and an inverse transform), which lower, or sample on the host.",
    ),
    Cause(
        "no-tpu-lowering",
        r".",
        "This op has no TPU lowering in torchax (and torch has no decomposition into ops it lowers), so "
        "the graph gets no TPU program. Rewrite it with ops that lower, or register a lowering with "
        "torchax (`torchax.ops.jaten`).",
    ),
)
"""Ops of a Dynamo graph with no TPU lowering (the TPU view of any backend: lowered by torchax)."""


def classify_tpu_break(op: str) -> Cause:
    """The ``TPU_CAUSES`` row for an op with no TPU lowering."""
    return next(cause for cause in TPU_CAUSES if cause.matches(op))


HOST_TENSOR = Cause(
    "host-tensor",
    r".",
    "This node reads or makes a tensor that is not on the XLA device (a CPU input, `.cpu()`, "
    "`.to('cpu')`), so the bridge runs it outside XLA. Keep every tensor of the compiled "
    "function on the XLA device.",
)


COLLECTIVE_SPLIT = Cause(
    "collective-split",
    r".",
    "TorchTPU's split compiler compiles each collective outside an `spmd_safe` region as a "
    "program of its own, cutting the graph around it (XLA cannot fuse or overlap across the cut). "
    "Where every rank runs the same ops in the same order and shapes, decorate the function "
    "with `torch_tpu.spmd_safe` so the collective is compiled into the surrounding program.",
)
"""The cut a collective makes in a TorchTPU graph (its ``collective`` segments)."""


RECOMPILE_CAUSES: tuple[Cause, ...] = (
    Cause(
        "another-backend",
        r"^\s*$|BACKEND_MATCH|different backend",
        "The function was compiled before with another backend (each backend keeps its own "
        "compiled code; torch 2.9 names no guard for it, later torch says BACKEND_MATCH). Compile "
        "a function with one backend per process, and reuse one backend object.",
    ),
    Cause(
        "shape-change",
        r"size mismatch|stride mismatch|dimension|\.size\(\)|\.shape",
        "An input's shape changed. Keep shapes fixed (pad batches and sequences to a few sizes), "
        "or mark the varying dimension with torch._dynamo.mark_dynamic / dynamic=True.",
    ),
    Cause(
        "value-specialisation",
        r"___stack\d*\s*==|==\s*-?[\d.]+|\bL\['\w+'\]\s*==",
        "Dynamo specialised on a Python value (often one read with .item() or a Python number "
        "argument) and it changed. Keep it a tensor, or pass it as a tensor argument.",
    ),
    Cause(
        "tensor-property",
        r"dtype|device|requires_grad|dispatch key",
        "An input's dtype, device or requires_grad changed. Call the compiled function with "
        "tensors of one kind, or compile one copy per kind.",
    ),
    Cause(
        "global-state",
        r"GLOBAL_STATE|grad_mode|autocast|deterministic",
        "Global state the graph depends on changed (grad mode, autocast...). Call the compiled "
        "function under one setting.",
    ),
    Cause(
        "other",
        r".",
        "A guard of the earlier compilation failed. Run with TORCH_LOGS=recompiles for every "
        "guard, and keep what it names the same from call to call.",
    ),
)


def guard_text(reason: str) -> str:
    """The guard failure without Dynamo's ``frame/n:`` prefix (``0/0: x`` is ``x``)."""
    head, separator, rest = reason.partition(": ")
    if separator and "/" in head and " " not in head:
        return rest
    return "" if reason.rstrip().endswith(":") and " " not in reason.strip() else reason


def failed_guard(reason: str) -> str:
    """The guard expression that failed, alone: Dynamo's reason less its ``frame/n:`` prefix and the
    ``# source line`` comment it appends (``___stack0 == 4.24 # if x.item() > 5: # m.py:3 in f``)."""
    return first_line(guard_text(reason)).split("  #", 1)[0].split(" # ", 1)[0].strip()


def classify_recompile(reason: str) -> Cause:
    """The first recompile cause whose pattern matches the guard failure in ``reason``."""
    text = guard_text(reason)
    return next(cause for cause in RECOMPILE_CAUSES if cause.matches(text))


def classify_dynamo_break(reason: str) -> Cause:
    """The first Dynamo cause whose pattern matches ``reason``."""
    return next(cause for cause in DYNAMO_CAUSES if cause.matches(reason))


def classify_hlo_break(op: str, *, fell_back: bool) -> Cause:
    """Why the node running ``op`` (``aten::exp2``) left XLA.

    ``fell_back`` says whether torch_xla ran the op through its CPU fallback; a node that
    did not fall back left XLA because a tensor it touches is not on the XLA device.
    """
    if not fell_back:
        return HOST_TENSOR
    return next(cause for cause in HLO_CAUSES if cause.matches(op))


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped (a reason's headline)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


# --------------------------------------------------------------------------- collectives
