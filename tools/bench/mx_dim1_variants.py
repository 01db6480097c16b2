"""Where the time of the column-wise (dim1) Triton cast goes, on the H100 at 256 MB (bf16 16384 x 8192):
variants of its kernel with parts removed (the block maximum and scaling, the scale-byte stores), the
tile loaded already transposed (DIRECT), and a persistent software-pipelined loop; each full variant
checked byte for byte against xlabridge.mx.to_mxfp8(x, dim=0).

    PYTHONPATH=. python3 tools/bench/mx_dim1_variants.py   # writes tools/bench/results/mx_dim1_variants.json ($OUT/ if set)

The variants copy the kernel's body with 4 warps per program, so the results file says where
the time of that version went; rerun it after changing the kernel.
"""
import json
import os
import statistics
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from xlabridge import mx
from xlabridge.mx._triton.cols_kernel import _codes, _scaled


@triton.jit
def k_var(x_ptr, d_ptr, s_ptr, R, B, stride_r, TILE_R: tl.constexpr, TILE_B: tl.constexpr,
          DIRECT: tl.constexpr, SCALES: tl.constexpr, COMPUTE: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_b = tl.program_id(1)
    r = pid_r * TILE_R + tl.arange(0, TILE_R)
    b = pid_b * TILE_B + tl.arange(0, TILE_B)
    if DIRECT:
        xt = tl.load(x_ptr + r[None, :] * stride_r + b[:, None])
    else:
        xt = tl.trans(tl.load(x_ptr + r[:, None] * stride_r + b[None, :]))
    xt32 = xt.to(tl.float32)
    if COMPUTE:
        bits = xt32.to(tl.int32, bitcast=True) & 0x7FFFFFFF
        amax = tl.max(tl.reshape(bits, (TILE_B, TILE_R // 32, 32)), axis=2)
        code = _codes(amax, False, 1.0 / 448.0)
        data = tl.reshape(_scaled(tl.reshape(xt32, (TILE_B, TILE_R // 32, 32)), code[:, :, None], False), (TILE_B, TILE_R))
    else:
        data = xt32
    tl.store(d_ptr + b[:, None] * R + r[None, :], data.to(tl.float8e4nv))
    if SCALES and COMPUTE:
        ncb = R // 32
        rb = pid_r * (TILE_R // 32) + tl.arange(0, TILE_R // 32)
        tl.store(s_ptr + b[:, None] * ncb + rb[None, :], code.to(tl.uint8))


@triton.jit
def k_persistent(x_ptr, d_ptr, s_ptr, R, B, stride_r, n_tiles, TILE_R: tl.constexpr, TILE_B: tl.constexpr,
                 STAGES: tl.constexpr):
    tiles_r = R // TILE_R
    for t in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), num_stages=STAGES):
        pid_r = t % tiles_r
        pid_b = t // tiles_r
        r = pid_r * TILE_R + tl.arange(0, TILE_R)
        b = pid_b * TILE_B + tl.arange(0, TILE_B)
        xt = tl.trans(tl.load(x_ptr + r[:, None] * stride_r + b[None, :]))
        xt32 = xt.to(tl.float32)
        bits = xt32.to(tl.int32, bitcast=True) & 0x7FFFFFFF
        amax = tl.max(tl.reshape(bits, (TILE_B, TILE_R // 32, 32)), axis=2)
        code = _codes(amax, False, 1.0 / 448.0)
        data = tl.reshape(_scaled(tl.reshape(xt32, (TILE_B, TILE_R // 32, 32)), code[:, :, None], False), (TILE_B, TILE_R))
        tl.store(d_ptr + b[:, None] * R + r[None, :], data.to(tl.float8e4nv))
        ncb = R // 32
        rb = pid_r * (TILE_R // 32) + tl.arange(0, TILE_R // 32)
        tl.store(s_ptr + b[:, None] * ncb + rb[None, :], code.to(tl.uint8))


def gpu_time(fn, reps=20):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); g.replay(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)


R, B = 16384, 8192
x = torch.randn(R, B, device="cuda", dtype=torch.bfloat16)
ref = mx.to_mxfp8(x, dim=0)
d = torch.empty(B, R, device="cuda", dtype=torch.float8_e4m3fn)
s = torch.empty(B, R // 32, device="cuda", dtype=torch.uint8)
dst = torch.empty_like(x)
out = {"copy_ms": gpu_time(lambda: dst.copy_(x)), "current_ms": gpu_time(lambda: mx.to_mxfp8(x, dim=0))}
nsm = torch.cuda.get_device_properties(0).multi_processor_count
for tr, tb, w in [(64, 128, 4), (32, 128, 4), (64, 64, 4), (128, 128, 8), (32, 256, 8)]:
    for direct in (False, True):
        for scales, compute in ((True, True), (False, True), (False, False)):
            name = f"var_{tr}x{tb}w{w}_direct{int(direct)}_scales{int(scales)}_compute{int(compute)}"
            try:
                def fn(tr=tr, tb=tb, w=w, direct=direct, scales=scales, compute=compute):
                    k_var[(R // tr, B // tb)](x, d, s, R, B, x.stride(0), TILE_R=tr, TILE_B=tb, DIRECT=direct,
                                              SCALES=scales, COMPUTE=compute, num_warps=w)
                out[name] = gpu_time(fn)
                if scales and compute:
                    fn(); torch.cuda.synchronize()
                    out[name + "_exact"] = bool(torch.equal(d.view(torch.uint8), ref.data.view(torch.uint8)) and torch.equal(s, ref.scale))
            except Exception as e:  # noqa: BLE001 - recorded
                out[name] = repr(e)[:200]
            print(name, out[name], flush=True)
for tr, tb, w in [(64, 128, 4), (32, 128, 4), (64, 64, 4)]:
    for stages in (1, 2, 3):
        for mult in (4, 8):
            name = f"persistent_{tr}x{tb}w{w}_stages{stages}_x{mult}"
            n_tiles = (R // tr) * (B // tb)
            try:
                def fn(tr=tr, tb=tb, w=w, stages=stages, mult=mult, n_tiles=n_tiles):
                    k_persistent[(min(n_tiles, nsm * mult),)](x, d, s, R, B, x.stride(0), n_tiles, TILE_R=tr, TILE_B=tb,
                                                              STAGES=stages, num_warps=w)
                out[name] = gpu_time(fn)
                fn(); torch.cuda.synchronize()
                out[name + "_exact"] = bool(torch.equal(d.view(torch.uint8), ref.data.view(torch.uint8)) and torch.equal(s, ref.scale))
            except Exception as e:  # noqa: BLE001 - recorded
                out[name] = repr(e)[:200]
            print(name, out[name], flush=True)
with open(os.path.join(os.environ.get("OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")), "mx_dim1_variants.json"), "w") as f:
    json.dump(out, f, indent=1)
