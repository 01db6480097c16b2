"""What of TorchTPU runs on a machine without a TPU, and how what needs one fails (docs/guides/torchtpu.md)."""

import os
import subprocess
import sys
import traceback

import pytest
import torch

from tests.torchtpu.conftest import REASON, tpu_present

pytest.importorskip("torch_tpu", reason=REASON)

needs_no_tpu = pytest.mark.skipif(tpu_present(), reason="a TPU is present: these check the failures without one")
# libtpu without a TPU VM's metadata server (else it retries for minutes), and without its process
# lock (/tmp/libtpu_lockfile, held by any TPU compile worker alive on the machine)
_QUIET = {"TPU_SKIP_MDS_QUERY": "1", "TPU_ACCELERATOR_TYPE": "v6e-4", "TPU_WORKER_HOSTNAMES": "localhost",
          "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


def test_autoload_registers_backend_and_amp_policy():
    """``import torch`` loads torch_tpu (torch.backends entry point): the "tpu" Dynamo backend and
    TorchTPU's AutocastPrivateUse1 kernels (its csrc/eager/amp_policies.cc) are registered."""
    import torch_tpu  # noqa: F401  (already loaded by torch's backend autoload)

    assert "tpu" in torch._dynamo.list_backends()
    ops = torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1")
    assert "aten::mm" in ops and "aten::einsum" in ops
    assert "amp_policies.cc" in torch._C._dispatch_dump_table("aten::mm")


def test_torch_alone_has_no_privateuse1_amp_policy():
    """The reference: the same torch without the autoload has no AutocastPrivateUse1 kernel."""
    code = ("import torch, sys; print(len(torch._C._dispatch_get_registrations_for_dispatch_key("
            "'AutocastPrivateUse1')), 'torch_tpu' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
                         capture_output=True, text=True, timeout=300, check=True).stdout.split()
    assert out == ["0", "False"]


@needs_no_tpu
def test_tpu_device_is_not_registered():
    with pytest.raises(RuntimeError, match="privateuseone device type at start of device string: tpu"):
        torch.ones(4, device="tpu")


@needs_no_tpu
def test_backend_runs_until_its_lowering():
    """backend="tpu" on CPU tensors: Dynamo, AOTAutograd and the split compiler run; fx_to_mlir fails
    (it lowers by running the graph on the tpu device, and asks that device's generators)."""
    torch._dynamo.reset()
    with pytest.raises(Exception) as caught:
        torch.compile(lambda x: torch.nn.functional.gelu(x @ x).sum(), backend="tpu")(torch.randn(8, 8))
    frames = [(f.filename.rsplit("torch_tpu/", 1)[-1], f.name) for f in traceback.extract_tb(caught.value.__traceback__)]
    assert ("_internal/export/export.py", "fx_to_mlir") in frames
    assert ("_internal/compile/split_compiler.py", "compile_submod") in frames


@needs_no_tpu
def test_eager_tpu_tensor_aborts_the_process():
    """With the device registered by hand, a tensor on it is made (lazily), and the first use of its
    data kills the process: TorchTPU's runtime finds no TPU topology (a C++ CHECK, SIGABRT)."""
    code = ("import torch, torch_tpu; from torch_tpu import _loader; _loader._init_device('tpu'); "
            "t = torch.empty(2, device='tpu'); print('made', t.device, flush=True); t.cpu(); print('used')")
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **_QUIET),
                          capture_output=True, text=True, timeout=300, check=False)
    assert "made tpu:0" in done.stdout and "used" not in done.stdout
    fatal = [line for line in done.stderr.splitlines() if "Check failed" in line]
    assert done.returncode != 0 and fatal, done.stderr[-2000:]
    assert "Failed to create default compilation context" in fatal[0], fatal[0]
    assert "Failed to get global TPU topology" in fatal[0], fatal[0]
