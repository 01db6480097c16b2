"""The kernel-count worker: ``python -m xlabridge.hlo MODULE.pb`` compiles and runs an HLO module
proto once on zero inputs, with torch_xla's own XLA, so that XLA dumps its optimized HLO
(``--xla_dump_to``, set by ``xlabridge.hlo.kernel_count`` for this process only)."""

from __future__ import annotations

import re
import sys

from xlabridge._upstream import torch_xla as upstream_xla


def _compile_module(proto_path: str) -> None:
    """Worker: compile and run an HLO module proto once on zero inputs (XLA dumps the result)."""
    import torch
    import torch_xla
    import torch_xla.core.xla_builder as xb

    with open(proto_path, "rb") as f:
        proto = f.read()
    computation = xb.computation_from_module_proto("xlabridge_kernel_count", proto)
    program = upstream_xla.computation_text(computation)
    entry = program[program.index("ENTRY") :].splitlines()[0]
    params = re.findall(r"(\w+)\[([\d,]*)\]", entry[: entry.index("->")])
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
              "s32": torch.int32, "s64": torch.int64, "u8": torch.uint8, "s8": torch.int8, "pred": torch.bool,
              "u32": torch.uint32, "s16": torch.int16, "f8e4m3fn": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}
    device = torch_xla.device()
    inputs = [torch.zeros([int(d) for d in dims.split(",") if d], dtype=dtypes[t]).to(device) for t, dims in params]
    torch_xla.sync()
    outputs = upstream_xla.user_computation("xlabridge::kernel_count", inputs, computation)
    torch_xla.sync()
    for out in outputs:
        out.cpu()


if __name__ == "__main__":
    _compile_module(sys.argv[1])
