"""Errors of xlabridge.tpu say what to do: missing libtpu, bad topology, refused graph, dead worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import requires_xla
from tests.tpu.conftest import requires_tpu_compiler
from xlabridge import tpu
from xlabridge.errors import TpuCompileError, TpuWorkerError, UnknownTopologyError

ROOT = Path(__file__).resolve().parents[2]

# Complex128 has no TPU support: XLA:TPU refuses the graph with an error.
COMPLEX128_FFT = """module @m {
  func.func public @main(%arg0: tensor<8xcomplex<f64>>) -> tensor<8xcomplex<f64>> {
    %0 = stablehlo.fft %arg0, type = FFT, length = [8] : (tensor<8xcomplex<f64>>) -> tensor<8xcomplex<f64>>
    return %0 : tensor<8xcomplex<f64>>
  }
}"""
# A TopK custom call with an array result where XLA expects a tuple: libtpu 0.0.23 fails a C++
# check on it ("Expected a tuple shape") and aborts the process.
ABORTING_TOPK = """module @m {
  func.func public @main(%arg0: tensor<8x128xf32>) -> tensor<8x128xf32> {
    %0 = stablehlo.custom_call @TopK(%arg0) : (tensor<8x128xf32>) -> tensor<8x128xf32>
    return %0 : tensor<8x128xf32>
  }
}"""
SIN = """module @m {
  func.func public @main(%arg0: tensor<8x128xf32>) -> tensor<8x128xf32> {
    %0 = stablehlo.sine %arg0 : tensor<8x128xf32>
    return %0 : tensor<8x128xf32>
  }
}"""

_HIDE_LIBTPU = """
import importlib.abc, sys

class HideLibtpu(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "libtpu" or name.startswith("libtpu."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, HideLibtpu())
import xlabridge
from xlabridge import tpu
try:
    tpu.TpuCompiler("tpu:v5e")
except xlabridge.MissingDependencyError as error:
    print("missing:", error)
"""


def test_missing_libtpu_names_the_extra_to_install():
    done = subprocess.run(
        [sys.executable, "-c", _HIDE_LIBTPU], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PJRT_DEVICE="CPU"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "missing:" in done.stdout and "libtpu" in done.stdout
    assert "pip install 'xlabridge[tpu-compile]'" in done.stdout


@pytest.mark.parametrize("target", ["tpu:v9", "v5e", "v5e:2x2x2x2", "tpu:v5e:two"])
def test_target_syntax_and_generation_are_checked_before_any_worker(target):
    if target == "v5e":  # a bare generation means its default topology
        assert tpu.resolve_target(target) == tpu.Topology("v5e:2x2", "v5e")
        return
    with pytest.raises(UnknownTopologyError, match="v5e:2x2.*v6e:2x4"):
        tpu.resolve_target(target)


@requires_tpu_compiler
def test_topology_libtpu_refuses_lists_the_valid_names(compiler):
    with pytest.raises(UnknownTopologyError, match=r"v5e:1x1.*not divisible.*Topologies it builds here: v4:2x2x1"):
        compiler.compile_stablehlo(SIN, topology="tpu:v5e:1x1")


@requires_tpu_compiler
def test_refused_graph_gives_xla_message_and_saved_graph(compiler):
    with pytest.raises(TpuCompileError, match="C128 is not supported on TPU") as info:
        compiler.compile_stablehlo(COMPLEX128_FFT, name="fft")
    error = info.value
    assert not isinstance(error, TpuWorkerError)
    assert "refused graph 'fft'" in str(error) and error.graph_path in str(error)
    assert "stablehlo.fft" in Path(error.graph_path).read_text()


@requires_tpu_compiler
def test_worker_abort_is_an_error_and_the_next_compile_gets_a_new_worker(compiler):
    with pytest.raises(TpuWorkerError, match=r"died \(signal SIGABRT\)[\s\S]*Check failed") as info:
        compiler.compile_stablehlo(ABORTING_TOPK, name="topk")
    assert "TopK" in Path(info.value.graph_path).read_text()
    assert compiler.compile_stablehlo(SIN).kernel_count == 1


@requires_tpu_compiler
def test_worker_that_stops_answering_times_out():
    with tpu.TpuCompiler("tpu:v5e", timeout=3) as compiler:
        compiler.compile_stablehlo(SIN)  # started and warm
        os.kill(compiler._process.pid, signal.SIGSTOP)  # frozen, as a hung libtpu would be
        started = time.monotonic()
        with pytest.raises(TpuWorkerError, match="did not finish compiling graph 'graph' .* within 3 s"):
            compiler.compile_stablehlo(SIN)
        assert time.monotonic() - started < 30


@requires_tpu_compiler
def test_bad_arguments_name_the_argument(compiler):
    with pytest.raises(ValueError, match="num_partitions must be a positive int"):
        compiler.compile_stablehlo(SIN, num_partitions=0)
    with pytest.raises(ValueError, match="num_partitions=8 but topology v5e:2x2 has 4 devices"):
        compiler.compile_stablehlo(SIN, num_partitions=8)
    with pytest.raises(ValueError, match="must be importable there"):
        compiler.compile_jax(lambda x: x, _spec())
    with pytest.raises(TypeError, match="argument 0 must be a jax.ShapeDtypeStruct"):
        compiler.compile_jax("tests.tpu._functions:add", (8, 128))
    with pytest.raises(ValueError, match="in_specs needs a mesh"):
        compiler.compile_jax("tests.tpu._functions:add", _spec(), _spec(), in_specs=[None, None])
    with pytest.raises(TypeError, match="proto must be the bytes"):
        compiler.compile_hlo_proto("HloModule m")


def _spec():
    import jax

    return jax.ShapeDtypeStruct((8, 128), "float32")


@requires_xla
@requires_tpu_compiler
def test_compile_tensors_wants_xla_tensors(compiler):
    import torch

    with pytest.raises(ValueError, match=r"on the XLA device .*: not so at position\(s\) \[0\]"):
        compiler.compile_tensors([torch.ones(2)])
    with pytest.raises(ValueError, match="got an empty sequence"):
        compiler.compile_tensors([])
