"""torch's private surfaces that xlabridge reaches: the dispatcher, Dynamo, FakeTensor, ops, inductor.

Each function wraps one private name (or the few a single step needs) and says, in its
docstring, which names and which torch releases it was checked on (``_registry.surface``). The
accessors at the end return a private module, class or table that a caller patches, subclasses
or reads, each with the attributes its callers use. Nothing here imports torch before a wrapper
is called: ``import xlabridge`` stays free of torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any

from xlabridge._upstream._registry import surface

if TYPE_CHECKING:
    # For annotations only: the types of what the wrappers below hand out.
    from torch._C import Argument, DispatchKeySet, FunctionSchema
    from torch._ops import OpOverload

CHECKED = ("2.8.0", "2.9.0", "2.15.0")
"""The torch releases of the CI environments (xla28, pinned, newest and TorchTPU)."""


# ---------------------------------------------------------------- the dispatcher and ops


@surface("torch", "torch._C._get_privateuse1_backend_name", checked=CHECKED)
def privateuse1_backend_name() -> str:
    """The device name of the PrivateUse1 backend: ``privateuseone``, or ``tpu`` once TorchTPU renames it."""
    import torch

    return torch._C._get_privateuse1_backend_name()


@surface("torch", "torch._C.DispatchKeySet", "torch._C._dispatch_key_parse", checked=CHECKED)
def dispatch_key_set(key: str) -> DispatchKeySet:
    """The dispatch key set of the one key named ``key`` (``"AutocastXLA"``)."""
    import torch

    return torch._C.DispatchKeySet(torch._C._dispatch_key_parse(key))


@surface("torch", "torch._C._dispatch_get_registrations_for_dispatch_key", checked=CHECKED)
def dispatch_registrations(key: str) -> list[str]:
    """The ops with a kernel of their own (fallthrough or not) for dispatch key ``key``."""
    import torch

    return torch._C._dispatch_get_registrations_for_dispatch_key(key)


@surface("torch", "torch._C._dispatch_has_kernel_for_dispatch_key", checked=CHECKED)
def dispatch_has_kernel(op: str, key: str) -> bool:
    """Whether op ``op`` (``"aten::mm"``) has a kernel of its own for dispatch key ``key``."""
    import torch

    return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)


@surface("torch", "torch._C._dispatch_kernel_for_dispatch_key_is_fallthrough", checked=CHECKED)
def dispatch_kernel_is_fallthrough(op: str, key: str) -> bool:
    """Whether op ``op``'s kernel for dispatch key ``key`` is a fallthrough."""
    import torch

    return torch._C._dispatch_kernel_for_dispatch_key_is_fallthrough(op, key)


@surface("torch", "torch._C._AutoDispatchBelowAutograd", checked=CHECKED)
def below_autograd() -> AbstractContextManager[Any]:
    """A guard (``with`` it) under which calls dispatch below the Autograd keys."""
    import torch

    return torch._C._AutoDispatchBelowAutograd()


@surface("torch", "torch._C._ExcludeDispatchKeyGuard", checked=CHECKED)
def excluding_dispatch_keys(keyset: DispatchKeySet) -> AbstractContextManager[Any]:
    """A guard (``with`` it) under which the keys of ``keyset`` are skipped by the dispatcher."""
    import torch

    return torch._C._ExcludeDispatchKeyGuard(keyset)


@surface("torch", "torch.Tensor._make_wrapper_subclass", checked=CHECKED)
def make_wrapper_subclass(cls: type, size: Sequence[int], **kwargs: Any) -> Any:
    """A data-less instance of tensor subclass ``cls`` of ``size`` (``dtype=``, ``device=``...)."""
    import torch

    return torch.Tensor._make_wrapper_subclass(cls, size, **kwargs)


@surface("torch", "torch._ops.OpOverload", attributes=("_schema",), checked=CHECKED)
def op_schema(target: Any) -> FunctionSchema | None:
    """The schema of an op overload (``aten::mm``'s arguments, name, mutability); None for other targets."""
    return getattr(target, "_schema", None)


@surface("torch", "torch._ops.OpOverloadPacket", attributes=("_qualified_op_name",), checked=CHECKED)
def qualified_op_name(packet: Any) -> str:
    """``aten::mm`` for an op overload packet (``torch.ops.aten.mm``); ``""`` for other targets."""
    return getattr(packet, "_qualified_op_name", "")


@surface("torch", "torch.library.Library", attributes=("_destroy",), checked=CHECKED)
def destroy_library(library: Any) -> None:
    """Remove every registration made through ``library`` (a ``torch.library.Library``)."""
    library._destroy()


@surface("torch", "torch._decomp.get_decompositions", checked=CHECKED)
def decompositions(ops: Iterable[Any]) -> dict[Any, Callable[..., Any]]:
    """torch's own decomposition of each of ``ops`` (op overloads or packets), by overload."""
    from torch._decomp import get_decompositions

    return get_decompositions(list(ops))


# ---------------------------------------------------------------- Dynamo, FakeTensor, inductor


@surface("torch", "torch._dynamo.reset", checked=CHECKED)
def dynamo_reset() -> None:
    """Clear Dynamo's caches, so that every frame is compiled afresh."""
    import torch._dynamo

    torch._dynamo.reset()


@surface("torch", "torch._guards.CompileContext.current_compile_id", checked=CHECKED)
def current_compile_id() -> Any:
    """The id of the Dynamo compilation running now (``0/1``: frame 0, recompiled once), or None."""
    import torch._guards

    return torch._guards.CompileContext.current_compile_id()


@surface("torch", "torch._guards.TracingContext.try_get", checked=CHECKED)
def tracing_context() -> Any:
    """The tracing context of the Dynamo compilation running now (its ``fake_mode``), or None."""
    import torch._guards

    return torch._guards.TracingContext.try_get()


@surface("torch", "torch._subclasses.FakeTensorMode", checked=CHECKED)
def fake_tensor_mode(**kwargs: Any) -> Any:
    """A new FakeTensor mode (``allow_non_fake_inputs=True``...)."""
    import torch._subclasses

    return torch._subclasses.FakeTensorMode(**kwargs)


@surface("torch", "torch._dispatch.python.enable_python_dispatcher", checked=CHECKED)
def python_dispatcher() -> AbstractContextManager[Any]:
    """A context under which the dispatcher runs Python kernels and decompositions (as AOTAutograd does)."""
    import torch._dispatch.python

    return torch._dispatch.python.enable_python_dispatcher()


@surface("torch", "torch._dynamo.utils.get_compilation_metrics", checked=CHECKED)
def compilation_metrics() -> list[Any]:
    """Dynamo's record of each compilation (ids, times, recompile reason, code), oldest first."""
    from torch._dynamo.utils import get_compilation_metrics

    return list(get_compilation_metrics())


@surface("torch", "torch._dynamo.backends.registry.lookup_backend", checked=CHECKED)
def lookup_backend(name: str) -> Callable[..., Any]:
    """The Dynamo backend registered as ``name``, loaded through its entry point if need be."""
    from torch._dynamo.backends.registry import lookup_backend as lookup

    return lookup(name)


@surface(
    "torch", "torch._dynamo.repro.after_dynamo.WrapBackendDebug",
    attributes=("_torchdynamo_orig_backend", "_torchdynamo_orig_callable"), checked=CHECKED,
)
def original_backend(compiler_fn: Any) -> Any:
    """The backend a Dynamo wrapper of one stands for (``compiler_fn`` itself if it wraps none):
    Dynamo hands ``OutputGraph`` the user's backend wrapped (``WrapBackendDebug``), which keeps it
    as ``_torchdynamo_orig_backend`` (torch 2.9 and later) or ``_torchdynamo_orig_callable`` (2.8)."""
    for attribute in ("_torchdynamo_orig_backend", "_torchdynamo_orig_callable"):
        if hasattr(compiler_fn, attribute):
            return getattr(compiler_fn, attribute)
    return compiler_fn


@surface("torch", "torch._inductor.compile_fx.compile_fx", checked=CHECKED)
def inductor_compile(gm: Any, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """``gm`` compiled by inductor (what ``backend="inductor"`` does with a Dynamo graph)."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)


@surface("torch", "torch._decomp.core_aten_decompositions", checked=CHECKED)
def core_decompositions() -> dict[Any, Callable[..., Any]]:
    """torch's table of decompositions into its core ATen op set, by op overload."""
    from torch._decomp import core_aten_decompositions

    return dict(core_aten_decompositions())


@surface("torch", "torch._functorch.aot_autograd.aot_module_simplified", checked=CHECKED)
def aot_module_simplified(gm: Any, args: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """AOTAutograd on a Dynamo graph (what ``aot_autograd(...)`` backends call): its forward and
    backward (or inference) graphs handed to the compilers in ``kwargs``."""
    from torch._functorch.aot_autograd import aot_module_simplified as aot

    return aot(gm, args, **kwargs)


@surface("torch", "torch._functorch.config.force_non_lazy_backward_lowering", "torch._functorch.config.patch",
         checked=("2.15.0",),
         missing_from=("2.8.0", "2.9.0"))
def eager_backward_compile() -> AbstractContextManager[Any]:
    """A context under which AOTAutograd hands the backward graph to its compiler when it traces the
    forward (not at the first ``backward()``). torch 2.9 and earlier lack the switch: there the TPU
    view of any backend's graphs is not made (it needs torchax, which the TorchTPU environment has)."""
    from torch._functorch import config

    config.force_non_lazy_backward_lowering  # noqa: B018 - a missing switch raises here, not at entry
    return config.patch(force_non_lazy_backward_lowering=True)


@surface("torch", "torch._functorch.partitioners.min_cut_rematerialization_partition", checked=CHECKED)
def min_cut_partition() -> Callable[..., Any]:
    """The partitioner inductor and TorchTPU give AOTAutograd (what the backward saves or recomputes)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return min_cut_rematerialization_partition


@surface("torch", "torch._functorch.aot_autograd.make_boxed_func",
         "torch._functorch.aot_autograd.boxed_nop_preserve_node_meta", checked=CHECKED)
def boxed_nop(gm: Any) -> Callable[..., Any]:
    """``gm`` as AOTAutograd's boxed calling convention wants it, unchanged (its ``nop`` compiler):
    ``boxed_nop_preserve_node_meta`` where torch has it (2.9 and later: run by an FX interpreter with
    the nodes' metadata kept), else ``gm`` boxed as it is (2.8 lacks that nop)."""
    from torch._functorch import aot_autograd

    nop = getattr(aot_autograd, "boxed_nop_preserve_node_meta", None)
    return nop(gm, None) if nop is not None else aot_autograd.make_boxed_func(gm)


# ---------------------------------------------------------------- accessors: patched, compared, read


@surface("torch", "torch._C._set_grad_enabled", checked=CHECKED, uses=("__call__",))
def set_grad_enabled_function() -> Callable[[bool], None]:
    """The function Dynamo records in a graph for ``torch.set_grad_enabled`` (to recognise such nodes)."""
    import torch

    return torch._C._set_grad_enabled


@surface("torch", "torch._ops.HigherOrderOperator", checked=CHECKED, uses=("__call__",))
def higher_order_operator() -> type:
    """The class of higher-order ops (``cond``, ``wrap``...) that an FX node may call."""
    import torch._ops

    return torch._ops.HigherOrderOperator


@surface("torch", "torch._ops.OpOverload", checked=CHECKED, uses=("__instancecheck__",))
def op_overload() -> type:
    """The class of ``torch.ops.aten.mm.default`` (to tell op overloads from packets and functions)."""
    import torch._ops

    return torch._ops.OpOverload


@surface("torch", "torch._ops.OpOverloadPacket", checked=CHECKED, uses=("__getattr__",))
def op_overload_packet() -> type:
    """The class of ``torch.ops.aten.mm``; its ``__getattr__`` resolves an overload (``.default``)."""
    import torch._ops

    return torch._ops.OpOverloadPacket


@surface("torch", "torch._ops._OpNamespace", checked=CHECKED, uses=("__getattr__",))
def op_namespace() -> type:
    """The class of ``torch.ops.aten``; its ``__getattr__`` resolves an op packet (``.mm``)."""
    import torch._ops

    return torch._ops._OpNamespace


@surface(
    "torch", "torch._dynamo.callback_handler", checked=CHECKED,
    uses=("register_start_callback", "remove_start_callback", "register_end_callback", "remove_end_callback",
          "start_callbacks", "end_callbacks"),
)
def dynamo_callback_handler() -> Any:
    """Dynamo's handler of compile start/end callbacks (run around every frame compilation)."""
    import torch._dynamo

    return torch._dynamo.callback_handler


@surface("torch", "torch._dynamo.output_graph.OutputGraph", checked=CHECKED, uses=("call_user_compiler",))
def output_graph() -> type:
    """Dynamo's ``OutputGraph``: its ``call_user_compiler`` hands each graph to the backend."""
    from torch._dynamo import output_graph as module

    return module.OutputGraph


@surface("torch", "torch._dynamo.eval_frame._TorchDynamoContext", checked=CHECKED, uses=("__call__",))
def dynamo_context() -> type:
    """The context every way into Dynamo applies to what it compiles: ``torch.compile(fn or module)``,
    ``nn.Module.compile()`` (``torch.compile(self._call_impl)``), the decorator and
    ``torch._dynamo.optimize(backend)(fn)`` all end in its ``__call__(fn)``."""
    from torch._dynamo import eval_frame

    return eval_frame._TorchDynamoContext


@surface("torch", "torch._dynamo.eval_frame._TorchDynamoContext",
         attributes=("callback", "_torchdynamo_orig_backend", "_torchdynamo_orig_callable"), checked=CHECKED)
def context_backend(context: Any) -> Any:
    """The backend a Dynamo context compiles with, as the user gave it: its ``callback`` (the frame
    converter) keeps it through a chain of ``_torchdynamo_orig_backend``; None for a context that
    compiles nothing (``torch._dynamo.disable``, ``run``)."""
    found = getattr(context, "callback", None)
    for _ in range(6):
        # torch 2.9 and later keep it as ``_torchdynamo_orig_backend``, 2.8 as ``_torchdynamo_orig_callable``
        inner = getattr(found, "_torchdynamo_orig_backend", None) or getattr(found, "_torchdynamo_orig_callable", None)
        if inner is None:
            break
        found = inner
    return None if found is None or isinstance(found, bool) else found


@surface("torch", "torch._dynamo.eval_frame.DisableContext", "torch._dynamo.eval_frame.RunOnlyContext",
         checked=CHECKED)
def dynamo_contexts_that_compile_nothing() -> tuple[type, ...]:
    """Dynamo's contexts that keep code out of compilation or only run what was compiled
    (``torch._dynamo.disable``, ``torch._dynamo.run``): applying them is no request to compile."""
    from torch._dynamo import eval_frame

    return (eval_frame.DisableContext, eval_frame.RunOnlyContext)


@surface("torch", "torch._dynamo.trace_rules.check", checked=CHECKED)
def dynamo_skips(code: Any) -> bool:
    """Whether Dynamo skips frames of ``code`` (a code object): the test its frame callback applies
    to each frame before tracing it, ``trace_rules.check(frame.f_code)`` (torch's own files among them)."""
    from torch._dynamo import trace_rules

    return bool(trace_rules.check(code))


@surface(
    "torch", "torch._dynamo.backends.distributed.DDPOptimizer", checked=CHECKED,
    attributes=("bucket_bytes_cap", "first_bucket_cap", "backend_compile_fn", "buckets", "Bucket.size"),
    uses=("compile_fn", "__init__"),
)
def ddp_optimizer() -> type:
    """DDPOptimizer: where ``torch._dynamo.config.optimize_ddp`` is on and the compiled frame runs inside
    a DDP module's forward, Dynamo hands each graph to its bound ``compile_fn`` instead of the backend.
    An instance keeps the bucket caps it was made with (``bucket_bytes_cap``, ``first_bucket_cap``), the
    backend it wraps (``backend_compile_fn``) and, after ``compile_fn``, the graph's buckets (``buckets``,
    each with its parameter bytes ``size``, graph order)."""
    from torch._dynamo.backends import distributed

    return distributed.DDPOptimizer


@surface("torch", "torch._dynamo.backends.registry._COMPILER_FNS", checked=CHECKED, uses=("items", "__setitem__"))
def dynamo_backends() -> dict[str, Callable[..., Any]]:
    """Dynamo's table of registered backends by name (read, and an entry replaced for a while)."""
    from torch._dynamo.backends import registry

    return registry._COMPILER_FNS


@surface(
    "torch", "torch._dynamo.backends.torchxla", checked=CHECKED,
    uses=("openxla", "openxla_eval", "xla_backend_helper"),
)
def torchxla_backends() -> ModuleType:
    """torch's module of the ``openxla`` backends; its ``xla_backend_helper`` hands graphs to torch_xla."""
    from torch._dynamo.backends import torchxla

    return torchxla


@surface("torch", "torch._inductor.compile_fx", checked=CHECKED, uses=("_compile_fx_inner",))
def inductor_compile_fx() -> ModuleType:
    """Inductor's compile module: ``_compile_fx_inner`` compiles one forward, backward or inference
    graph (codegen, the C++/Triton compile, autotuning), called by ``compile_fx_inner`` through its
    module's globals at each call."""
    from torch._inductor import compile_fx

    return compile_fx


@surface("torch", "torch._inductor.compile_worker.subproc_pool.SubprocPool", checked=CHECKED,
         uses=("__init__", "submit", "shutdown"))
def inductor_subproc_pool() -> type:
    """Inductor's compile-worker pool (its default ``worker_start_method``, ``subprocess``): a sidecar
    process running a process pool; ``shutdown`` asks it to stop and waits for it (at exit, from the
    ``atexit`` handler ``torch._inductor.async_compile`` registers)."""
    from torch._inductor.compile_worker import subproc_pool

    return subproc_pool.SubprocPool


@surface("torch", "torch.autograd.Variable._execution_engine", checked=CHECKED, uses=("queue_callback",))
def autograd_engine() -> Any:
    """The autograd engine: ``queue_callback(fn)``, called during a backward pass, runs ``fn`` after
    the pass's graph has run, with the final callbacks DDP's reducer and FSDP queue there."""
    import torch

    return torch.autograd.Variable._execution_engine


@surface("torch", "torch._dynamo.compiled_autograd.compiled_autograd_enabled", checked=CHECKED)
def compiled_autograd_on() -> bool:
    """Whether Dynamo's compiled autograd captures backward passes now (its hooks are traced then)."""
    import sys

    if "torch._dynamo" not in sys.modules:
        return False
    from torch._dynamo import compiled_autograd

    return bool(compiled_autograd.compiled_autograd_enabled)


# ---------------------------------------------------------------- the structured trace (TORCH_TRACE)


@surface("torch", "torch._dynamo.__path__", checked=CHECKED)
def graph_break_codes() -> dict[str, str]:
    """Each graph-break type torch knows and its code (``"Data-dependent branching": "GB0170"``), from
    the registry torch ships beside Dynamo (``graph_break_registry.json``: code -> its types, newest
    first), which torch 2.9 and later also use to name a break's page."""
    import json

    import torch._dynamo

    path = torch._dynamo.__path__[0] + "/graph_break_registry.json"
    with open(path, encoding="utf-8") as file:
        registry = json.load(file)
    codes: dict[str, str] = {}
    for code, entries in registry.items():
        for entry in entries:
            codes.setdefault(str(entry.get("Gb_type", "")), code)
    codes.pop("", None)
    return codes


@surface("torch", "torch._logging._internal.trace_log.handlers", checked=CHECKED)
def structured_trace_on() -> bool:
    """Whether torch's structured trace is written anywhere in this process (``TORCH_TRACE``, or a
    handler a tool attached): ``trace_structured`` builds and writes records only then."""
    from torch._logging import _internal

    return bool(_internal.trace_log.handlers)


@surface("torch", "torch._logging.trace_structured", checked=CHECKED)
def write_trace_artifact(name: str, payload: str, *, encoding: str = "json") -> None:
    """Write ``payload`` into torch's structured trace as an artifact named ``name`` (``encoding``
    ``json`` or ``string``: how tlparse renders it), outside any compilation (no compile id)."""
    import torch._logging

    torch._logging.trace_structured(
        "artifact", metadata_fn=lambda: {"name": name, "encoding": encoding}, payload_fn=lambda: payload,
        expect_trace_id=False,
    )


@surface("torch", "torch._logging", checked=CHECKED, uses=("trace_structured",))
def structured_logging() -> ModuleType:
    """torch's logging package: its ``trace_structured`` writes each structured-trace record
    (``trace_structured(name, metadata_fn, *, payload_fn, ...)``; callers in Dynamo look it up on the
    package at each call), building the record only where the trace is written."""
    import torch._logging

    return torch._logging


@surface("torch", "torch._logging._internal.trace_log", checked=CHECKED, uses=("addHandler", "removeHandler", "handlers"))
def trace_logger() -> Any:
    """The logger torch writes its structured trace through (``torch.__trace``): each record carries the
    envelope as ``metadata`` and the payload as ``payload``; the ``TORCH_TRACE`` file is one of its handlers."""
    from torch._logging import _internal

    return _internal.trace_log


_NOT_TORCH_COMPILE = object()
"""``compile_call_dynamic``'s answer when the graph did not come through ``torch.compile``."""


@surface(
    "torch", "torch._dynamo.symbolic_convert.InstructionTranslator.current_tx", checked=CHECKED,
    attributes=("output.compiler_fn", "_torchdynamo_orig_backend", "_torchdynamo_orig_callable", "dynamic"),
)
def compile_call_dynamic() -> Any:
    """The ``dynamic`` argument of the ``torch.compile`` call whose frame Dynamo compiles now (``None``
    when the caller passed none), read off the backend wrapper ``torch.compile`` made
    (``_TorchCompileWrapper.dynamic``); ``NOT_TORCH_COMPILE`` when the frame did not come through
    ``torch.compile`` (``torch._dynamo.optimize``) or no frame is being compiled."""
    from torch._dynamo.symbolic_convert import InstructionTranslator

    try:
        tx = InstructionTranslator.current_tx()
    except AttributeError:  # its thread-local is unset before a thread's first compilation, and after each on torch 2.15
        return _NOT_TORCH_COMPILE
    backend = getattr(getattr(tx, "output", None), "compiler_fn", None)
    # Dynamo's debug wrapper names the torch.compile wrapper _torchdynamo_orig_backend (torch 2.9 and
    # later) or _torchdynamo_orig_callable (torch 2.8)
    wrapper = getattr(backend, "_torchdynamo_orig_backend", None) or getattr(backend, "_torchdynamo_orig_callable",
                                                                            backend)
    if wrapper is None or type(wrapper).__name__ != "_TorchCompileWrapper" or not hasattr(wrapper, "dynamic"):
        return _NOT_TORCH_COMPILE
    return wrapper.dynamic


NOT_TORCH_COMPILE = _NOT_TORCH_COMPILE


@surface("torch", "torch._dynamo.config.patch", checked=CHECKED)
def static_shapes() -> AbstractContextManager[Any]:
    """Dynamo's configuration as ``torch.compile(dynamic=False)`` sets it while a frame is traced
    (``eval_frame.make_set_enable_dynamic(False)``): no automatic dynamic shapes, static by default."""
    import torch._dynamo

    return torch._dynamo.config.patch(automatic_dynamic_shapes=False, assume_static_by_default=True)
