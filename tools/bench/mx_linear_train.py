"""MXFP8 linears in training (``xlabridge.mx.MXLinear``): loss curves against bf16, and what the
training step compiles to for TPUs.

``--train``: a small causal transformer (``tests/mx/_training.py``: 2 blocks, d=128, a seeded
Markov-chain language) trained with AdamW under bf16 autocast, once with ``torch.nn.Linear`` and
once with every linear swapped for ``MXLinear`` (forward and backward on MXFP8 operands, matmul
emulated), from the same initial weights on the same batches; on CUDA when there is a GPU.
Reports both loss curves, their SQNR (torchao's accuracy measure) and the largest per-step
relative difference, plus torchao's per-linear thresholds on one linear.

``--tpu``: compiles (libtpu, compile-only: not run) the forward and backward of one linear and of
a transformer training step (d=1024, 8 heads, 2 blocks, 4096 tokens) for v5e and v6e through
torch_xla with the TPU lowering (``xlabridge.hlo.kernel_count``), bf16 and MX, and reports
kernels, Mosaic custom calls and HBM per device.

    PYTHONPATH=. python tools/bench/mx_linear_train.py --train   # writes tools/bench/results/mx_linear_train.json
    PYTHONPATH=. python tools/bench/mx_linear_train.py --tpu     # writes tools/bench/results/mx_linear_train_tpu.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())


def _torchao_training(model, batches, bf16: list[float]) -> dict:
    """The same training with torchao's own MXFP8 training where it runs: torchao 0.18 moved it from
    ``mx_formats`` (``MXLinear``, 0.17) to ``moe_training`` (``MXFP8TrainingOpConfig`` through
    ``quantize_``, its ``EMULATED`` kernels on GPUs without MXFP8 matmuls such as the H100); its loss
    curve against bf16 as xlabridge's is measured. Older torchao: not run, said why."""
    import torch

    from tests.mx import _training

    try:
        import torchao
        from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig
        from torchao.quantization import quantize_
        from torchao.quantization.quantize_.common.kernel_preference import KernelPreference
    except ImportError as error:
        return {"not_run": f"torchao's MXFP8 training (torchao.prototype.moe_training, 0.18) is not here: {error}"}
    try:
        quantize_(model, MXFP8TrainingOpConfig(kernel_preference=KernelPreference.EMULATED))
        losses = _training.train(model, batches)
    except Exception as error:  # noqa: BLE001 - recorded: torchao's own path on this GPU
        return {"torchao": torchao.__version__, "not_run": f"{type(error).__name__}: {error}"[:500]}
    rel = [abs(a - b) / a for a, b in zip(bf16, losses)]
    return {"torchao": torchao.__version__, "config": "MXFP8TrainingOpConfig(kernel_preference=EMULATED)",
            "loss": losses, "loss_curve_sqnr_db": _training.sqnr_db(torch.tensor(bf16), torch.tensor(losses)),
            "max_step_relative_difference": max(rel), "final_loss": sum(losses[-20:]) / 20}


def train_side(steps: int) -> dict:
    import torch

    from tests.mx import _training
    from xlabridge import mx

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    base = _training.TinyLM().to(device)
    mx_model = mx.MXLinear.swap(copy.deepcopy(base))
    base_copy = copy.deepcopy(base)
    batches = [b.to(device) for b in _training.markov_batches(steps, seed=1)]
    started = time.perf_counter()
    bf16 = _training.train(base, batches)
    mxfp8 = _training.train(mx_model, batches)
    rel = [abs(a - b) / a for a, b in zip(bf16, mxfp8)]
    out = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "steps": steps,
        "model": {"d_model": _training.D_MODEL, "heads": _training.HEADS, "layers": _training.LAYERS,
                  "seq": _training.SEQ, "batch": _training.BATCH, "vocab": _training.VOCAB,
                  "mx_linears": sum(isinstance(m, mx.MXLinear) for m in mx_model.modules())},
        "seconds": time.perf_counter() - started,
        "loss_bf16": bf16,
        "loss_mxfp8": mxfp8,
        "loss_curve_sqnr_db": _training.sqnr_db(torch.tensor(bf16), torch.tensor(mxfp8)),
        "max_step_relative_difference": max(rel),
        "mean_relative_difference_last_50": sum(rel[-50:]) / len(rel[-50:]),
        "final_loss": {"bf16": sum(bf16[-20:]) / 20, "mxfp8": sum(mxfp8[-20:]) / 20},
        "torchao_training": _torchao_training(base_copy, batches, bf16),
    }
    # torchao's per-linear thresholds (test_linear_eager_vs_hp, mxfp8: y >= 18 dB, grad_w >= 18 dB,
    # grad_x >= 12 dB) on a [128, 256] -> 512 linear
    ref = torch.nn.Sequential(torch.nn.Linear(256, 512)).to(device, torch.bfloat16)
    mxl = mx.MXLinear.swap(copy.deepcopy(ref))
    x_ref = torch.randn(4, 32, 256, device=device, dtype=torch.bfloat16, requires_grad=True)
    x = x_ref.detach().clone().requires_grad_()
    g = torch.randn(4, 32, 512, device=device, dtype=torch.bfloat16)
    y_ref, y = ref(x_ref), mxl(x)
    y_ref.backward(g)
    y.backward(g)
    out["linear_sqnr_db"] = {
        "y": _training.sqnr_db(y_ref, y),
        "grad_w": _training.sqnr_db(ref[0].weight.grad, mxl[0].weight.grad),
        "grad_x": _training.sqnr_db(x_ref.grad, x.grad),
        "torchao_thresholds": {"y": 18.0, "grad_w": 18.0, "grad_x": 12.0},
    }
    return out


def _linear_step(x, w, g, use_mx: bool):
    import torch.nn.functional as F

    from xlabridge import mx

    x.requires_grad_()
    w.requires_grad_()
    y = mx.mx_linear(x, w) if use_mx else F.linear(x, w)
    y.backward(g)
    return y, x.grad, w.grad


def _model_step(tokens, use_mx: bool):
    import torch

    from tests.mx import _training
    from xlabridge import mx

    torch.manual_seed(0)
    model = _training.TinyLM(vocab=4096, d=1024, heads=8, layers=2, seq=tokens.shape[1] - 1).to(tokens.device)
    if use_mx:
        mx.MXLinear.swap(model)
    loss = _training.loss_of(model, tokens)
    loss.backward()
    return [loss] + [p.grad for p in model.parameters()]


def tpu_side() -> dict:
    import functools

    import torch

    from xlabridge import hlo

    out: dict = {"label": "compiled for TPU by libtpu (compile-only), not run"}
    cases = {
        "linear_8192x4096x4096": (
            _linear_step,
            (torch.randn(8192, 4096, dtype=torch.bfloat16), torch.randn(4096, 4096, dtype=torch.bfloat16),
             torch.randn(8192, 4096, dtype=torch.bfloat16)),
        ),
        "transformer_step_d1024_4096_tokens": (
            _model_step,
            (torch.randint(4096, (8, 513)),),
        ),
    }
    for generation in ("v5e", "v6e"):
        for case, (fn, args) in cases.items():
            for use_mx in (False, True):
                name = f"{case}/{'mxfp8' if use_mx else 'bf16'}/{generation}"
                started = time.perf_counter()
                try:
                    report = hlo.kernel_count(functools.partial(fn, use_mx=use_mx), *args, target=f"tpu:{generation}")
                except Exception as error:  # noqa: BLE001 - recorded
                    out[name] = {"error": repr(error)[:2000]}
                    continue
                memory = report.tpu.memory
                out[name] = {
                    "kernels": report.count,
                    "tpu_custom_calls": sum(k == "custom-call/tpu_custom_call" for k in report.kernels),
                    "hbm_total_MiB": memory.total_bytes / 2**20,
                    "hbm_argument_MiB": memory.argument_bytes / 2**20,
                    "hbm_output_MiB": memory.output_bytes / 2**20,
                    "hbm_temp_MiB": memory.temp_bytes / 2**20,
                    "cost_model_us": None if report.tpu.cost_model_seconds is None else report.tpu.cost_model_seconds * 1e6,
                    "seconds": time.perf_counter() - started,
                }
                print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tpu", action="store_true")
    parser.add_argument("--out", help="default: tools/bench/results/mx_linear_train.json (_tpu.json with --tpu alone)")
    args = parser.parse_args()
    args.out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "mx_linear_train_tpu.json" if args.tpu and not args.train else "mx_linear_train.json")
    results: dict = {"command": " ".join(sys.argv)}
    if args.train:
        results["train"] = train_side(args.steps)
    if args.tpu:
        import importlib.metadata

        results["libtpu"] = importlib.metadata.version("libtpu")
        results["tpu"] = tpu_side()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
