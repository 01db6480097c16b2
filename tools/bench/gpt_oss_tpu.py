"""gpt-oss-20b on a TPU, compiled by libtpu's compile-only client (nothing runs on a TPU): its MoE
block at decode with the expert weights in MXFP4 (read by xlabridge's Mosaic matmul) against the
same block with bfloat16 experts, and a whole decode step holding all of the model's weights, to
see whether they fit one chip.

    PYTHONPATH=. python tools/bench/gpt_oss_tpu.py --out tools/bench/results/gpt_oss_tpu.json

Shapes are gpt-oss-20b's public config (``openai/gpt-oss-20b``'s ``config.json``: 24 layers,
hidden and intermediate size 2880, 32 experts, 4 per token, 64 query heads and 8 key/value heads
of 64, vocabulary 201088, untied embeddings, SwiGLU clamped at 7 with alpha 1.702; expert weights
MXFP4 as ``*_blocks``/``*_scales``, the rest bfloat16, as the checkpoint stores them).

The MoE block at decode, as written here: router, top-4, softmax over the four; the experts the
``T`` tokens chose (``min(32, 4T)`` distinct ones, ``jnp.unique``) each take all ``T`` tokens, so
each chosen expert's weights are read once per step (a decode step is weight-bound); their
outputs are combined with the routing weights. The whole step: embedding, per layer RMSNorm,
attention over a one-token context (q, k, v, o projections and the learned sinks all used),
the MoE block; final norm, LM head. Every weight is an argument of the program, so the executable's
argument bytes are the model's weights, and XLA:TPU says whether they fit the chip's HBM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

LAYERS, HIDDEN, INTERMEDIATE, EXPERTS, TOP_K = 24, 2880, 2880, 32, 4
HEADS, KV_HEADS, HEAD_DIM, VOCAB = 64, 8, 64, 201088
SWIGLU_LIMIT, SWIGLU_ALPHA, EPS = 7.0, 1.702, 1e-5
TOKENS = (1, 8, 64)


def layer_specs(fmt: str) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of one layer's weights; experts in ``fmt`` ("mxfp4" or "bf16")."""
    attention = [("q_w", (HEADS * HEAD_DIM, HIDDEN), "bfloat16"), ("q_b", (HEADS * HEAD_DIM,), "bfloat16"),
                 ("k_w", (KV_HEADS * HEAD_DIM, HIDDEN), "bfloat16"), ("k_b", (KV_HEADS * HEAD_DIM,), "bfloat16"),
                 ("v_w", (KV_HEADS * HEAD_DIM, HIDDEN), "bfloat16"), ("v_b", (KV_HEADS * HEAD_DIM,), "bfloat16"),
                 ("o_w", (HIDDEN, HEADS * HEAD_DIM), "bfloat16"), ("o_b", (HIDDEN,), "bfloat16"),
                 ("sinks", (HEADS,), "bfloat16"), ("ln1", (HIDDEN,), "bfloat16"), ("ln2", (HIDDEN,), "bfloat16"),
                 ("router_w", (EXPERTS, HIDDEN), "bfloat16"), ("router_b", (EXPERTS,), "bfloat16"),
                 ("gate_up_b", (EXPERTS, 2 * INTERMEDIATE), "bfloat16"), ("down_b", (EXPERTS, HIDDEN), "bfloat16")]
    if fmt == "mxfp4":
        experts = [("gate_up_blocks", (EXPERTS, 2 * INTERMEDIATE, HIDDEN // 2), "uint8"),
                   ("gate_up_scales", (EXPERTS, 2 * INTERMEDIATE, HIDDEN // 32), "uint8"),
                   ("down_blocks", (EXPERTS, HIDDEN, INTERMEDIATE // 2), "uint8"),
                   ("down_scales", (EXPERTS, HIDDEN, INTERMEDIATE // 32), "uint8")]
    else:
        experts = [("gate_up_w", (EXPERTS, 2 * INTERMEDIATE, HIDDEN), "bfloat16"), ("down_w", (EXPERTS, HIDDEN, INTERMEDIATE), "bfloat16")]
    return attention + experts


def model_specs(fmt: str) -> list[tuple[str, tuple[int, ...], str]]:
    specs = [("embed", (VOCAB, HIDDEN), "bfloat16"), ("lm_head", (VOCAB, HIDDEN), "bfloat16"), ("norm", (HIDDEN,), "bfloat16")]
    for layer in range(LAYERS):
        specs += [(f"{layer}.{name}", shape, dtype) for name, shape, dtype in layer_specs(fmt)]
    return specs


def _rms_norm(h, weight):
    import jax.numpy as jnp

    h32 = h.astype(jnp.float32)
    return (h32 * jnp.reciprocal(jnp.sqrt(jnp.mean(h32 * h32, axis=-1, keepdims=True) + EPS)) * weight).astype(h.dtype)


def _experts(x, p: dict, which: str, ids, fmt: str):
    """``[A, T, N]``: expert ``ids[a]``'s projection ``which`` of ``x[a]``, plus its bias."""
    import jax.numpy as jnp

    bias = p[f"{which}_b"].astype(jnp.float32)
    if fmt == "mxfp4":
        from xlabridge.mx._mosaic import fp4_matmul

        return fp4_matmul.expert_linear(x, p[f"{which}_blocks"], p[f"{which}_scales"], ids, bias)
    w = p[f"{which}_w"][ids]  # the chosen experts' bf16 weights
    return (jnp.einsum("atk,ank->atn", x, w, preferred_element_type=jnp.float32) + bias[ids][:, None, :]).astype(x.dtype)


def moe_block(h, p: dict, fmt: str):
    """gpt-oss's MoE MLP for ``h`` ``[T, HIDDEN]`` at decode (see the module docstring)."""
    import jax
    import jax.numpy as jnp

    tokens = h.shape[0]
    logits = jnp.dot(h, p["router_w"].T, preferred_element_type=jnp.float32) + p["router_b"].astype(jnp.float32)
    top_logits, top_ids = jax.lax.top_k(logits, TOP_K)
    probs = jax.nn.softmax(top_logits, axis=-1)
    groups = min(EXPERTS, TOP_K * tokens)
    ids = jnp.unique(top_ids.reshape(-1), size=groups, fill_value=EXPERTS)  # padded with an id no token has
    valid = ids < EXPERTS
    ids = jnp.minimum(ids, EXPERTS - 1).astype(jnp.int32)
    combine = jnp.einsum("tk,tka->ta", probs, (top_ids[:, :, None] == ids[None, None, :]).astype(jnp.float32)) * valid
    x = jnp.broadcast_to(h, (groups, tokens, HIDDEN))
    gate_up = _experts(x, p, "gate_up", ids, fmt)
    gate, up = gate_up[..., ::2].astype(jnp.float32), gate_up[..., 1::2].astype(jnp.float32)
    gate = jnp.minimum(gate, SWIGLU_LIMIT)
    up = jnp.clip(up, -SWIGLU_LIMIT, SWIGLU_LIMIT)
    activated = ((up + 1) * gate * jax.nn.sigmoid(gate * SWIGLU_ALPHA)).astype(h.dtype)
    down = _experts(activated, p, "down", ids, fmt)
    return jnp.einsum("ta,ath->th", combine, down.astype(jnp.float32)).astype(h.dtype)


def _attention_one_token(h, p: dict):
    """Attention of each token over a context of itself alone, gpt-oss's learned sinks in the softmax."""
    import jax
    import jax.numpy as jnp

    tokens = h.shape[0]
    q = (jnp.dot(h, p["q_w"].T) + p["q_b"]).reshape(tokens, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
    k = (jnp.dot(h, p["k_w"].T) + p["k_b"]).reshape(tokens, KV_HEADS, 1, HEAD_DIM)
    v = (jnp.dot(h, p["v_w"].T) + p["v_b"]).reshape(tokens, KV_HEADS, 1, HEAD_DIM)
    score = jnp.sum(q.astype(jnp.float32) * k.astype(jnp.float32), axis=-1) / jnp.sqrt(HEAD_DIM)
    sinks = p["sinks"].astype(jnp.float32).reshape(KV_HEADS, HEADS // KV_HEADS)
    weight = jax.nn.sigmoid(score - sinks)  # softmax over [score, sink]: the token's share
    out = (weight[..., None] * v.astype(jnp.float32)).astype(h.dtype).reshape(tokens, HEADS * HEAD_DIM)
    return jnp.dot(out, p["o_w"].T) + p["o_b"]


def _unflatten(specs, arrays) -> dict:
    return {name: array for (name, _, _), array in zip(specs, arrays)}


def moe_block_program(h, *weights, fmt: str):
    """One layer's MoE block (its ``ln2`` norm first): the compiled unit of the block rows."""
    p = _unflatten(layer_specs(fmt), weights)
    return moe_block(_rms_norm(h, p["ln2"]), p, fmt)


def decode_step(token_ids, *weights, fmt: str):
    """The whole model's decode step for ``token_ids`` ``[T]``: logits ``[T, VOCAB]``."""
    import jax.numpy as jnp

    p = _unflatten(model_specs(fmt), weights)
    h = p["embed"][token_ids]
    for layer in range(LAYERS):
        lp = {name.split(".", 1)[1]: array for name, array in p.items() if name.startswith(f"{layer}.")}
        h = h + _attention_one_token(_rms_norm(h, lp["ln1"]), lp).astype(h.dtype)
        h = h + moe_block(_rms_norm(h, lp["ln2"]), lp, fmt)
    return jnp.dot(_rms_norm(h, p["norm"]), p["lm_head"].T, preferred_element_type=jnp.float32)


def _summary(result) -> dict:
    memory = result.memory
    return {"kernel_count": result.kernel_count,
            "tpu_custom_calls": sum(k == "custom-call/tpu_custom_call" for k in result.kernels),
            "argument_bytes": None if memory is None else memory.argument_bytes,
            "temp_bytes": None if memory is None else memory.temp_bytes,
            "total_hbm_bytes": None if memory is None else memory.total_bytes,
            "hbm_capacity_bytes": None if memory is None else memory.capacity_bytes,
            "fits": result.fits, "out_of_memory": result.out_of_memory and result.out_of_memory[:400],
            "cost_model_bytes": result.bytes_accessed, "cost_model_s": result.cost_model_seconds,
            "compile_s": result.compile_seconds, "label": result.label}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="gpt_oss_tpu.json")
    parser.add_argument("--generations", default="v6e,v5e")
    parser.add_argument("--no-model", action="store_true", help="the MoE block rows only")
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import functools

    import jax

    from tools.bench import gpt_oss_tpu as this  # by its import name, so the compile worker can import it
    from xlabridge import tpu

    S = jax.ShapeDtypeStruct
    started = time.time()
    results: dict = {"commit": os.environ.get("XLABRIDGE_COMMIT"), "command": " ".join(sys.argv),
                     "what": "compiled for TPU by libtpu's compile-only client, not run",
                     "config": {"layers": LAYERS, "hidden": HIDDEN, "intermediate": INTERMEDIATE, "experts": EXPERTS,
                                "experts_per_token": TOP_K, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
                                "vocab": VOCAB},
                     "moe_block": [], "model": []}
    for fmt in ("mxfp4", "bf16"):
        specs = model_specs(fmt)
        results[f"weight_bytes_{fmt}"] = sum(
            __import__("math").prod(shape) * (1 if dtype == "uint8" else 2) for _, shape, dtype in specs)
        results[f"parameters_{fmt}"] = sum(
            __import__("math").prod(shape) * (2 if name.endswith("_blocks") else 0 if name.endswith("_scales") else 1)
            for name, shape, _ in specs)
    generations = args.generations.split(",")
    with tpu.TpuCompiler(f"tpu:{generations[0]}") as compiler:
        for generation in generations:
            for tokens in TOKENS:
                for fmt in ("mxfp4", "bf16"):
                    weights = [S(shape, dtype) for _, shape, dtype in layer_specs(fmt)]
                    result = compiler.compile_jax(functools.partial(this.moe_block_program, fmt=fmt),
                                                  S((tokens, HIDDEN), "bfloat16"), *weights, topology=f"tpu:{generation}")
                    row = {"generation": generation, "tokens": tokens, "experts": fmt,
                           "experts_read": min(EXPERTS, TOP_K * tokens), "kernels": list(result.kernels), **_summary(result)}
                    results["moe_block"].append(row)
                    print(json.dumps({k: row[k] for k in ("generation", "tokens", "experts", "kernel_count", "tpu_custom_calls",
                                                          "argument_bytes", "cost_model_s")}), flush=True)
            if args.no_model:
                continue
            for fmt in ("mxfp4", "bf16"):
                weights = [S(shape, dtype) for _, shape, dtype in model_specs(fmt)]
                result = compiler.compile_jax(functools.partial(this.decode_step, fmt=fmt), S((1,), "int32"), *weights,
                                              topology=f"tpu:{generation}")
                row = {"generation": generation, "tokens": 1, "experts": fmt, **_summary(result)}
                results["model"].append(row)
                print(json.dumps({k: row[k] for k in ("generation", "experts", "kernel_count", "argument_bytes", "fits",
                                                      "out_of_memory")}), flush=True)
        results["libtpu"], results["jax"] = compiler.versions["libtpu"], compiler.versions["jax"]
    results["seconds"] = time.time() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
