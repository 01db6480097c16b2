"""Every wrapper of ``xlabridge._upstream`` called in this environment, one test each, named by it.

A call wrapper runs on a tiny input (``CASES``), its result checked; an accessor is resolved and
the attributes its callers use looked up (``Surface.uses``). The wrappers of an upstream this
environment lacks skip, naming it; those a release is known to lack (``Surface.missing_from``)
must raise ``UpstreamChangedError`` there. Run in each CI environment (pinned, torch_xla 2.8,
newest torch, TorchTPU), a release that moves a surface fails here, by the wrapper's name.
"""

from __future__ import annotations

import importlib
import logging
import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from xlabridge import _optional
from xlabridge._upstream import _registry, jax as upstream_jax, torch as upstream_torch
from xlabridge._upstream import torch_tpu as upstream_tpu, torch_xla as upstream_xla, torchax as upstream_torchax
from xlabridge._upstream._registry import SURFACES, installed_version, surface
from xlabridge.errors import UpstreamChangedError

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_MODULES = ("torch", "torch_xla", "torch_tpu", "jax", "torchax")

CASES: dict[str, Callable[[], None]] = {}
"""Each call wrapper's check, by ``Surface.qualified`` name."""


def case(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(check: Callable[[], None]) -> Callable[[], None]:
        CASES[name] = check
        return check

    return register


def _compiled_inside(fn: Callable[[], object]) -> list[object]:
    """What ``fn()`` returns when called by a Dynamo backend, for a tiny compiled function."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(fn())
        return gm

    upstream_torch.dynamo_reset()
    torch.compile(lambda x: x.sin() + 1, backend=backend)(torch.ones(3))
    upstream_torch.dynamo_reset()
    return seen


# ---------------------------------------------------------------- torch


@case("torch.privateuse1_backend_name")
def _() -> None:
    name = upstream_torch.privateuse1_backend_name()
    assert isinstance(name, str) and name


@case("torch.dispatch_key_set")
def _() -> None:
    keyset = upstream_torch.dispatch_key_set("AutocastCPU")
    assert isinstance(keyset, torch._C.DispatchKeySet) and "AutocastCPU" in repr(keyset)


@case("torch.dispatch_registrations")
def _() -> None:
    assert "aten::mm" in upstream_torch.dispatch_registrations("AutocastCPU")


@case("torch.dispatch_has_kernel")
def _() -> None:
    assert upstream_torch.dispatch_has_kernel("aten::mm", "AutocastCPU") is True
    assert upstream_torch.dispatch_has_kernel("aten::sin", "AutocastCPU") is False


@case("torch.dispatch_kernel_is_fallthrough")
def _() -> None:
    assert upstream_torch.dispatch_kernel_is_fallthrough("aten::mm", "AutocastCPU") is False


@case("torch.excluding_dispatch_keys")
def _() -> None:
    a = torch.ones(2, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(a, a).dtype == torch.bfloat16
        with upstream_torch.excluding_dispatch_keys(upstream_torch.dispatch_key_set("AutocastCPU")):
            assert torch.mm(a, a).dtype == torch.float32


@case("torch.below_autograd")
def _() -> None:
    x = torch.ones(2, requires_grad=True)
    with upstream_torch.below_autograd():
        y = torch.ops.aten.mul.Tensor(x, 2)
    assert y.grad_fn is None and y.tolist() == [2.0, 2.0]


@case("torch.make_wrapper_subclass")
def _() -> None:
    class Empty(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError

    made = upstream_torch.make_wrapper_subclass(Empty, (2, 3), dtype=torch.float16, device="cpu")
    assert type(made) is Empty and made.shape == (2, 3) and made.dtype == torch.float16


@case("torch.op_schema")
def _() -> None:
    schema = upstream_torch.op_schema(torch.ops.aten.mm.default)
    assert schema.name == "aten::mm" and [a.name for a in schema.arguments] == ["self", "mat2"]
    assert upstream_torch.op_schema(torch.ops.aten.add_.Tensor).is_mutable
    assert upstream_torch.op_schema(len) is None


@case("torch.qualified_op_name")
def _() -> None:
    assert upstream_torch.qualified_op_name(torch.ops.aten.mm) == "aten::mm"
    assert upstream_torch.qualified_op_name(len) == ""


@case("torch.destroy_library")
def _() -> None:
    for _ in range(2):  # a fragment's op can be defined again only once the first is destroyed
        library = torch.library.Library("xlabridge_surface_test", "FRAGMENT")
        library.define("twice(Tensor x) -> Tensor")
        upstream_torch.destroy_library(library)


@case("torch.decompositions")
def _() -> None:
    op = torch.ops.aten.native_layer_norm_backward.default
    assert callable(upstream_torch.decompositions([op])[op])


@case("torch.dynamo_reset")
def _() -> None:
    calls = []

    def backend(gm, example_inputs):
        calls.append(gm)
        return gm

    fn = torch.compile(lambda x: x + 1, backend=backend)
    fn(torch.ones(2))
    upstream_torch.dynamo_reset()
    fn(torch.ones(2))
    assert len(calls) == 2


@case("torch.current_compile_id")
def _() -> None:
    assert upstream_torch.current_compile_id() is None
    (compile_id,) = _compiled_inside(upstream_torch.current_compile_id)
    assert str(compile_id) == "0/0"


@case("torch.tracing_context")
def _() -> None:
    assert upstream_torch.tracing_context() is None
    (context,) = _compiled_inside(upstream_torch.tracing_context)
    assert context is not None and context.fake_mode is not None


@case("torch.fake_tensor_mode")
def _() -> None:
    with upstream_torch.fake_tensor_mode(allow_non_fake_inputs=True) as mode:
        fake = mode.from_tensor(torch.ones(2, 3), static_shapes=True) * torch.ones(3)
    assert fake.shape == (2, 3) and type(fake).__name__ == "FakeTensor"


@case("torch.python_dispatcher")
def _() -> None:
    with upstream_torch.python_dispatcher():
        assert (torch.ones(2) + 1).tolist() == [2.0, 2.0]


@case("torch.compilation_metrics")
def _() -> None:
    _compiled_inside(lambda: None)
    records = upstream_torch.compilation_metrics()
    assert records and all(hasattr(r, "compile_id") and hasattr(r, "start_time_us") for r in records)


@case("torch.lookup_backend")
def _() -> None:
    assert callable(upstream_torch.lookup_backend("eager"))


@case("torch.original_backend")
def _() -> None:
    from torch._dynamo.repro.after_dynamo import WrapBackendDebug

    def backend(gm, example_inputs):
        return gm

    assert upstream_torch.original_backend(WrapBackendDebug(backend, "test")) is backend
    assert upstream_torch.original_backend(backend) is backend


@case("torch.dynamo_skips")
def _() -> None:
    from torch.nn.modules.module import Module

    def mine(x):
        return x

    assert upstream_torch.dynamo_skips(Module._call_impl.__code__)
    assert upstream_torch.dynamo_skips(torch.nn.Sequential.forward.__code__)
    assert not upstream_torch.dynamo_skips(mine.__code__)


@case("torch.context_backend")
def _() -> None:
    def backend(gm, example_inputs):
        return gm

    compiled = torch.compile(lambda x: x + 1, backend=backend)
    found = upstream_torch.context_backend(torch._dynamo.optimize(backend))
    assert found is not None and callable(found)
    assert compiled(torch.ones(1)).item() == 2.0
    assert upstream_torch.context_backend(torch._dynamo.eval_frame.DisableContext()) is None


@case("torch.dynamo_contexts_that_compile_nothing")
def _() -> None:
    contexts = upstream_torch.dynamo_contexts_that_compile_nothing()
    assert all(isinstance(c, type) for c in contexts) and len(contexts) == 2


@case("torch.core_decompositions")
def _() -> None:
    table = upstream_torch.core_decompositions()
    assert torch.ops.aten.addmm.default in table or torch.ops.aten.gelu_backward.default in table


def _aot_graphs(**config: object) -> list[str]:
    """The roles AOTAutograd hands its compilers for a tiny training graph, with ``config``."""
    roles: list[str] = []

    def keep(role: str):
        def compiler(gm, example_inputs):
            roles.append(role)
            return upstream_torch.boxed_nop(gm)
        return compiler

    gm = torch.fx.symbolic_trace(lambda x, w: ((x @ w).sin().sum(),))
    with upstream_torch.fake_tensor_mode(allow_non_fake_inputs=True):
        args = [torch.empty(2, 3), torch.empty(3, 4, requires_grad=True)]
    upstream_torch.aot_module_simplified(gm, args, fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                                         partition_fn=upstream_torch.min_cut_partition(), **config)
    return roles


@case("torch.aot_module_simplified")
def _() -> None:
    assert _aot_graphs()[0] == "forward"


@case("torch.min_cut_partition")
def _() -> None:
    assert callable(upstream_torch.min_cut_partition())


@case("torch.boxed_nop")
def _() -> None:
    gm = torch.fx.symbolic_trace(lambda x: (x + 1,))
    assert upstream_torch.boxed_nop(gm)([torch.ones(2)])[0].tolist() == [2.0, 2.0]


@case("torch.eager_backward_compile")
def _() -> None:
    with upstream_torch.eager_backward_compile():
        assert _aot_graphs() == ["forward", "backward"]  # the backward handed over with the forward


@case("torch.inductor_compile")
def _() -> None:
    compiled = torch.compile(lambda x: x * 2 + 1, backend=upstream_torch.inductor_compile)
    upstream_torch.dynamo_reset()
    assert compiled(torch.ones(4)).tolist() == [3.0] * 4
    upstream_torch.dynamo_reset()


@case("torch.graph_break_codes")
def _() -> None:
    codes = upstream_torch.graph_break_codes()
    assert codes["Failed to trace builtin operator"] == "GB0059" and all(c.startswith("GB") for c in codes.values())


@case("torch.compiled_autograd_on")
def _() -> None:
    assert upstream_torch.compiled_autograd_on() is False


@case("torch.structured_trace_on")
def _() -> None:
    assert isinstance(upstream_torch.structured_trace_on(), bool)


@case("torch.write_trace_artifact")
def _() -> None:
    from torch._logging import _internal

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(({k: v for k, v in record.metadata.items() if k != "has_payload"}, record.payload))

    handler = Keep()
    _internal.trace_log.addHandler(handler)
    try:
        upstream_torch.write_trace_artifact("xlabridge_probe", '{"a": 1}')
    finally:
        _internal.trace_log.removeHandler(handler)
    assert seen == [({"artifact": {"name": "xlabridge_probe", "encoding": "json"}}, '{"a": 1}')]


@case("torch.compile_call_dynamic")
def _() -> None:
    seen = []

    def backend(gm, example_inputs):
        seen.append(upstream_torch.compile_call_dynamic())
        return gm

    for dynamic in (None, False, True):
        upstream_torch.dynamo_reset()
        torch.compile(lambda x: x.sin() + 1, backend=backend, dynamic=dynamic)(torch.ones(3))
    upstream_torch.dynamo_reset()
    assert seen == [None, False, True]
    assert upstream_torch.compile_call_dynamic() is upstream_torch.NOT_TORCH_COMPILE


@case("torch.static_shapes")
def _() -> None:
    import torch._dynamo

    with upstream_torch.static_shapes():
        assert torch._dynamo.config.automatic_dynamic_shapes is False
        assert torch._dynamo.config.assume_static_by_default is True


# ---------------------------------------------------------------- torch_xla


def _xla_device() -> torch.device:
    import torch_xla

    return torch_xla.device()


def _doubling() -> object:
    import torch_xla.core.xla_builder as xb

    builder = xb.create_builder("xlabridge_surface_test")
    x = xb.mkparam(builder, 0, xb.mkshape("f32", (2,)))
    return xb.Op.tuple([x + x]).build("xlabridge_surface_test")


@case("torch_xla.xlac_loaded")
def _() -> None:
    import torch_xla  # noqa: F401

    assert upstream_xla.xlac_loaded() is True


@case("torch_xla.tensors_hlo_proto")
def _() -> None:
    x = torch.ones(2, device=_xla_device()) + 1
    proto = upstream_xla.tensors_hlo_proto([x])
    assert isinstance(proto, bytes) and proto


@case("torch_xla.computation_text")
def _() -> None:
    assert "ENTRY" in upstream_xla.computation_text(_doubling())


@case("torch_xla.user_computation")
def _() -> None:
    x = torch.tensor([1.0, 2.0], device=_xla_device())
    (out,) = upstream_xla.user_computation("xlabridge::surface_test", [x], _doubling())
    assert out.cpu().tolist() == [2.0, 4.0]


@case("torch_xla.tpu_custom_call")
def _() -> None:
    # Lazy: the node is built here, never compiled (XLA:CPU has no Mosaic).
    x = torch.ones(8, 128, device=_xla_device())
    data, scale = upstream_xla.tpu_custom_call([x], "{}", [[8, 128], [8, 4]], [torch.float8_e4m3fn, torch.uint8])
    assert (data.shape, data.dtype, scale.shape, scale.dtype) == ((8, 128), torch.float8_e4m3fn, (8, 4), torch.uint8)


@case("torch_xla.computation_cache_initialized")
def _() -> None:
    (torch.ones(2, device=_xla_device()) + 1).cpu()
    assert upstream_xla.computation_cache_initialized() is True


# ---------------------------------------------------------------- torch_tpu


@case("torch_tpu.tpu_device_count")
def _() -> None:
    count = upstream_tpu.tpu_device_count()
    assert isinstance(count, int) and count >= 0


@case("torch_tpu.is_collective_op")
def _() -> None:
    assert upstream_tpu.is_collective_op(torch.ops._c10d_functional.all_reduce) is True
    assert upstream_tpu.is_collective_op(torch.ops.aten.mm) is False


@case("torch_tpu.bucket_specs")
def _() -> None:
    from torch_tpu._internal.compile.dynamic.dynamic_executable import DynamicTpuCompiledExecutable

    # Its instances need compiled bucket programs (a TPU): the attribute is checked where it is set.
    assert "self._bucket_specs =" in inspect.getsource(DynamicTpuCompiledExecutable.__init__)
    assert upstream_tpu.bucket_specs(object()) == []


@case("torch_tpu.tpu_compile_installed")
def _() -> None:
    from torch_tpu import _loader

    assert upstream_tpu.tpu_compile_installed() is False  # no TPU started here
    original, torch.compile = torch.compile, _loader._default_tpu_compile
    try:
        assert upstream_tpu.tpu_compile_installed() is True
    finally:
        torch.compile = original


# ---------------------------------------------------------------- jax


def _cpu_hlo_proto() -> bytes:
    """The optimized HLO module proto of a tiny JAX function compiled for XLA:CPU."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    text = jax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.ones((8, 128), jnp.float32)).as_text()
    devices = jax.devices("cpu")[:1]
    options = upstream_jax.compile_options(num_replicas=1, num_partitions=1, device_assignment=np.zeros((1, 1), int))
    with upstream_jax.ir_context():
        module = upstream_jax.module_to_bytecode(upstream_jax.mlir_ir().Module.parse(text))
    executable = devices[0].client.compile_and_load(module, upstream_jax.device_list(devices), options)
    return executable.hlo_modules()[0].as_serialized_hlo_module_proto()


@case("jax.compile_options")
def _() -> None:
    import numpy as np

    options = upstream_jax.compile_options(num_replicas=1, num_partitions=2, device_assignment=np.arange(2).reshape(1, 2))
    assert options.num_partitions == 2 and options.executable_build_options.use_spmd_partitioning
    assert _cpu_hlo_proto()


@case("jax.empty_compile_options")
def _() -> None:
    build = upstream_jax.empty_compile_options().executable_build_options
    build.num_partitions = 2
    assert build.num_partitions == 2


@case("jax.device_assignment")
def _() -> None:
    import numpy as np

    assignment = upstream_jax.device_assignment(np.arange(2).reshape(1, 2))
    assert (assignment.replica_count(), assignment.computation_count()) == (1, 2)


@case("jax.device_list")
def _() -> None:
    import jax

    devices = jax.devices("cpu")[:1]
    assert list(upstream_jax.device_list(devices)) == devices


@case("jax.ir_context")
def _() -> None:
    with upstream_jax.ir_context():
        module = upstream_jax.mlir_ir().Module.parse("module {}")
    assert str(module).startswith("module")


@case("jax.module_to_bytecode")
def _() -> None:
    with upstream_jax.ir_context():
        data = upstream_jax.module_to_bytecode(upstream_jax.mlir_ir().Module.parse("module {}"))
    assert data.startswith(b"ML\xefR")  # MLIR bytecode's magic number


@case("jax.hlo_to_stablehlo")
def _() -> None:
    assert upstream_jax.hlo_to_stablehlo(_cpu_hlo_proto()).startswith(b"ML\xefR")


@case("jax.hlo_module_text")
def _() -> None:
    assert "ENTRY" in upstream_jax.hlo_module_text(_cpu_hlo_proto())


# ---------------------------------------------------------------- torchax


@case("torchax.has_lowering")
def _() -> None:
    from xlabridge.tpu import _fx

    env = _fx.import_torchax()
    assert upstream_torchax.has_lowering(env, torch.ops.aten.mm.default) is True
    assert upstream_torchax.has_lowering(env, torch.ops.aten.adaptive_max_pool2d.default) is False


# ---------------------------------------------------------------- the tests


def _release(upstream: str) -> str:
    return installed_version(upstream).split("+")[0]


def _skip_if_absent(upstream: str) -> None:
    # torch_xla 2.9's wheel carries an old torchax of its own (no distribution of that name): absent
    if not _optional.is_available(upstream) or installed_version(upstream) == "not installed":
        pytest.skip(f"{upstream} is not installed in this environment: its wrappers are checked where it is")
    if upstream == "torch_xla" and (mismatch := _optional.torch_xla_mismatch()):
        pytest.skip(mismatch)


@pytest.mark.parametrize("name", [n for n, s in SURFACES.items() if not s.accessor])
def test_call_wrapper(name: str) -> None:
    info = SURFACES[name]
    _skip_if_absent(info.upstream)
    if _release(info.upstream) in info.missing_from:
        with pytest.raises(UpstreamChangedError, match=rf"xlabridge\._upstream\.{name} reaches it"):
            CASES[name]()
        return
    CASES[name]()


@pytest.mark.parametrize("name", [n for n, s in SURFACES.items() if s.accessor])
def test_accessor(name: str) -> None:
    info = SURFACES[name]
    _skip_if_absent(info.upstream)
    module = importlib.import_module(f"xlabridge._upstream.{info.upstream}")
    value = getattr(module, info.wrapper)()
    assert value is _registry.resolve(info.names[0])
    for use in info.uses:
        target = value
        for part in use.split("."):
            assert hasattr(target, part), f"{info.names[0]} has no {use} (xlabridge._upstream.{name})"
            target = getattr(target, part)


def test_every_call_wrapper_has_a_case() -> None:
    calls = {n for n, s in SURFACES.items() if not s.accessor}
    assert calls == set(CASES), f"without a case: {sorted(calls - set(CASES))}; stale: {sorted(set(CASES) - calls)}"


def test_each_wrapper_is_registered_under_its_module_and_documented() -> None:
    assert {s.upstream for s in SURFACES.values()} == set(UPSTREAM_MODULES)
    for name, info in SURFACES.items():
        wrapper = getattr(importlib.import_module(f"xlabridge._upstream.{info.upstream}"), info.wrapper)
        assert wrapper.surface is info, name
        assert info.names[0] in wrapper.__doc__ and info.checked[-1] in wrapper.__doc__, name


def test_a_missing_surface_names_itself_the_release_and_the_releases_checked(monkeypatch) -> None:
    monkeypatch.setattr(_registry, "SURFACES", {})

    @surface("torch", "torch._C._xlabridge_no_such_function", checked=("2.8.0", "2.9.0"))
    def gone() -> None:
        """A wrapper of a name no torch has."""
        torch._C._xlabridge_no_such_function()

    with pytest.raises(UpstreamChangedError) as raised:
        gone()
    message = str(raised.value)
    assert "torch._C._xlabridge_no_such_function" in message
    assert f"torch {installed_version('torch')}" in message and "checked on torch 2.8.0, 2.9.0" in message
    assert isinstance(raised.value, AttributeError) and isinstance(raised.value.__cause__, AttributeError)
    assert list(_registry.SURFACES) == ["torch.gone"]


def test_a_missing_module_is_named_too(monkeypatch) -> None:
    monkeypatch.setattr(_registry, "SURFACES", {})

    @surface("torch", "torch._xlabridge_no_such_module.function", checked=("2.9.0",))
    def gone() -> None:
        """A wrapper of a module no torch has."""
        from torch._xlabridge_no_such_module import function  # noqa: F401

    with pytest.raises(UpstreamChangedError, match=r"torch\._xlabridge_no_such_module is not in torch"):
        gone()


def test_an_error_inside_an_intact_surface_passes_through(monkeypatch) -> None:
    monkeypatch.setattr(_registry, "SURFACES", {})

    @surface("torch", "torch.nn.Module", checked=("2.9.0",))
    def raising() -> None:
        """A wrapper whose upstream call raises an AttributeError of its own."""
        raise AttributeError("an error of the upstream function itself")

    with pytest.raises(AttributeError, match="of the upstream function itself") as raised:
        raising()
    assert not isinstance(raised.value, UpstreamChangedError)


def test_importing_xlabridge_and_the_upstream_modules_imports_no_upstream() -> None:
    program = (
        "import json, sys\n"
        "import xlabridge\n"
        f"for name in {UPSTREAM_MODULES!r}:\n"
        "    __import__('xlabridge._upstream.' + name)\n"
        "print(json.dumps(sorted(m for m in ('torch', 'torch_xla', 'torch_tpu', 'jax', 'jaxlib', 'libtpu', 'torchax')"
        " if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
