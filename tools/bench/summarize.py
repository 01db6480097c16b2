"""Writes ``docs/benchmarks.md`` from the results files in ``tools/bench/results/``.

Each benchmark keeps one results file, its latest run, named after the benchmark (the script
writes that name by default); this module renders what each measures, its ratios against the
baseline measured in the same run, and the machine and versions it ran on. TPU figures are
compiled by libtpu's compile-only client, never run, and say so.

    python tools/bench/summarize.py            # rewrites docs/benchmarks.md
    python tools/bench/summarize.py --check    # exits 1 if docs/benchmarks.md is stale

``tests/docs/test_benchmarks_page.py`` fails when the page differs from ``render()`` or when a
results file has no section here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tools" / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
GUIDE = ROOT / "docs" / "guides" / "mxfp4.md"


@dataclasses.dataclass(frozen=True)
class Benchmark:
    results: str
    script: str
    title: str
    measures: str
    render: Callable[[dict], list[str]]


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _table(head: list[str], rows: list[list[object]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return out + [""]


def _x(ratio: float | None, digits: int = 2) -> str:
    return "-" if ratio is None else f"{ratio:.{digits}f}×"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:+.1f}%"


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


def _time(ms: float) -> str:
    return f"{ms * 1000:.1f} µs" if ms < 0.1 else f"{ms:.3f} ms"


def _load_average(data: dict) -> str:
    before, after = data.get("load_average_before"), data.get("load_average_after")
    if not before:
        return ""
    return f"; load average {before[0]:.1f} before, {after[0]:.1f} after" if after else f"; load average {before[0]:.1f}"


# -- the CPU benchmarks -------------------------------------------------------------------------


def _compile_time(data: dict) -> list[str]:
    rows = []
    for model, m in data["models"].items():
        med = m["median_first_call_s"]
        rows.append([model, _s(med["openxla"]), _s(med["xlabridge"]), _x(m["xlabridge_vs_openxla"]),
                     _x(m.get("xlabridge_vs_openxla_cpu")),
                     f"{m['xla_compiles']['openxla']} / {m['xla_compiles']['xlabridge']}"])
    return [
        f"Ran on PJRT {data['pjrt_device']}, {data['cpus']} CPUs{_load_average(data)}; torch {data['torch']}, "
        f"torch_xla {data['torch_xla']}; medians of {data['repeats']} fresh processes per configuration. "
        "The CPU-seconds ratio (the process's user and system time during the call, all threads) moves less "
        "than wall time when other work shares the machine.",
        "",
        *_table(["model", "openxla", "xlabridge (forward-only)", "xlabridge / openxla", "same, CPU seconds",
                 "XLA compiles (openxla / xlabridge)"], rows),
    ]


def _import_time(data: dict) -> list[str]:
    modules = data["median_module_s"]
    rows = [["xlabridge", f"{modules['xlabridge'] * 1e3:.1f} ms", _x(data["xlabridge_vs_torch"], 3),
             ", ".join(data["heavy_loaded"]["xlabridge"]) or "none"],
            ["xlabridge.backend", f"{modules['xlabridge.backend'] * 1e3:.1f} ms", _x(data["backend_vs_torch"], 3),
             ", ".join(data["heavy_loaded"]["xlabridge.backend"]) or "none"]]
    return [
        f"Python {data['python']}, torch {data['torch']}, {data['cpus']} CPUs{_load_average(data)}; medians of "
        f"{data['repeats']} fresh interpreters per module; `import torch` took {_s(data['median_import_torch_s'])} "
        f"(median); target: at most {_x(data['target'])} for `import xlabridge`.",
        "",
        *_table(["module", "import after torch", "(torch + module) / torch", "heavy packages loaded"], rows),
    ]


def _compile_time_tpu(data: dict) -> list[str]:
    rows = []
    for model, m in data["models"].items():
        tpu, cpu = m["median_tpu_compile_s"], m.get("median_cpu_xla_compile_s") or {}
        rows.append([model, "yes" if m["identical_graphs"] else "no", _s(tpu["aot_autograd"]), _s(tpu["forward_only"]),
                     _x(m["tpu_forward_only_vs_aot_autograd"]), _s(cpu.get("aot_autograd")), _s(cpu.get("forward_only")),
                     _x(m.get("cpu_forward_only_vs_aot_autograd"))])
    return [
        f"**{data['label']}** (jax {data['jax']}). {data['cpus']} CPUs{_load_average(data)}; medians of "
        f"{data['repeats']}. XLA:CPU columns: {data['cpu_figures']}.",
        "",
        *_table(["model", "same graphs on both paths", "XLA:TPU AOTAutograd", "XLA:TPU forward-only", "forward-only / AOTAutograd",
                 "XLA:CPU AOTAutograd", "XLA:CPU forward-only", "forward-only / AOTAutograd"], rows),
    ]


def _diagnostics_overhead(data: dict) -> list[str]:
    rows = []
    writes = any("log_writes_share_of_first_call" in m for m in data["models"].values())
    for model, m in data["models"].items():
        row = [model, _pct(m["steady_overhead"]), _pct(m["control_difference"]), _pct(m["first_call_overhead"])]
        if writes:
            row.append(f"{m['log_writes_share_of_first_call'] * 100:.2f}%")
        rows.append(row + [f"{m['bookkeeping_share_of_step'] * 100:.2f}%"])
    head = ["model", "steady state, observed vs openxla", "A/A control", "first call"]
    if writes:
        head.append("writing the log to the end of the first call, share of openxla's first call")
    loads = data.get("load_average_before_after")
    observed = f" Observed as `xlabridge report` observes: {data['observed']}." if data.get("observed") else ""
    load = f" Load average {loads[0][0]:.1f} before, {loads[1][0]:.1f} after." if loads else ""
    note = f" {data['note']}" if data.get("note") else ""
    return [
        f"Ran on {data['machine']}; torch {data['torch']}; {data['repeats']} runs of {data['steps']} steps. Steady "
        "state is paired: one process trains an openxla copy and an observed xlabridge copy, alternating steps; "
        "the A/A control pairs two plain openxla copies the same way, so it shows what the pairing itself "
        f"measures.{observed}{load}{note} Targets: steady state at most +2%, first call at most +10%; first "
        "calls of fresh processes on this machine vary by more than 10% between runs, so the time spent writing "
        "the log up to the end of the first call is also given as a share of openxla's first call.",
        "",
        *_table([*head, "observer's bookkeeping, share of a step"], rows),
    ]


def _long_runs(data: dict) -> list[str]:
    short, long = data["short"], data["long"]
    rows = [[f"{r['steps']:,}", f"{r['log_bytes']:,}", str(r["log_lines"]), _s(r["report_seconds"]),
             str(r["graphs"]), f"{r['steps_counted']:,}"] for r in (short, long)]
    return [
        f"Ran on {data['machine']}. A small MLP compiled with `openxla` (a graph break inside) trained under "
        "`xlabridge report --events DIR`, once for each length; the report built from the kept logs by "
        f"`read_run` (median of {len(short['report_seconds_runs'])} builds). Long run against the short run of the "
        f"same invocation: log x{data['log_ratio']:.2f} (target at most x2), report build "
        f"x{data.get('report_time_ratio', long['report_seconds'] / short['report_seconds']):.2f}.",
        "",
        *_table(["steps", "log bytes", "log lines", "report build", "XLA graphs", "steps counted"], rows),
    ]


def _card(machine: str) -> str:
    """The card a GPU run had; an H200 was lent where an H100 was asked for, and is named as such."""
    return f"{machine} (lent an H200, not an H100)" if "H200" in machine else machine


def _diagnostics_overhead_gpu(data: dict) -> list[str]:
    rows = [[i + 1, " then ".join(p["order"]), _x(p["steady_ratio"], 3), _x(p["first_step_ratio"], 3),
             _x(p["process_ratio"], 3)] for i, p in enumerate(data["pairs"])]
    return [
        f"Ran on {_card(data['machine'])}; torch {data['torch']}; {data['repeats']} pairs of processes, {data['steps']} "
        "steps each, the loop's own clock. Medians: steady step "
        f"{_pct(data['steady_overhead'])}, first step {_pct(data['first_step_overhead'])} and whole process "
        f"{_pct(data['process_overhead'])} (pairs after the first: the first fills inductor's cache).",
        "",
        *_table(["pair", "order", "steady step, observed / plain", "first step", "whole process"], rows),
    ]


def _gpu_report_check(data: dict) -> list[str]:
    rows = [[name, _s(seconds)] for name, seconds in data["rows"]]
    failures = "; ".join(data["failures"])
    return [
        f"Ran on {_card(data['machine'])}; torch {data['torch']}; Triton {data['triton']}; {data['steps']} steps. "
        f"Check {data['verdict']}{': ' + failures if failures else ''}. Source: {data['source']}.",
        "",
        *_table(["row", "seconds"], rows),
    ]


def _torchrun_shares(data: dict) -> list[str]:
    rows = []
    for run, result in data["runs"].items():
        if "error" in result:
            rows.append([run, "error", "-", "-", "-"])
            continue
        for entry in result["processes"]:
            shares = entry["shares"]
            # shares only: the compile workers' exit lies within "exit", helper seconds within the process
            big = sorted(((v, k) for k, v in shares.items() if k not in ("other", "helper_seconds", "compile_workers_exit")),
                         reverse=True)[:2]
            rows.append([run, entry["process"], _s(entry["wall"]), f"{100 * (entry['other_fraction'] or 0):.1f}%",
                         ", ".join(f"{k.replace('_', ' ')} {_s(v)}" for v, k in big)])
    note = f" ({data['card_note']})" if data.get("card_note") else ""
    return [
        f"Ran on {data['device']}{note}; torch {data['torch']}; {data['nproc']} ranks; backend {data['backend']}; "
        f"{data['steps']} steps. Cold: a fresh inductor cache; warm: the same job again with it.",
        "",
        *_table(["job", "process", "wall", "other", "largest shares"], rows),
    ]


def _pod_capture_overhead(data: dict) -> list[str]:
    rows = [[name, _x(c["steady_ratio"]), _x(c["first_ratio"])] for name, c in data["configurations"].items()]
    return [
        f"Ran on {data['machine']}; {data['devices']} devices; {data['model']}; {data['repeats']} rounds of "
        f"{data['steps']} steps; each ratio against the plain run of the same round.",
        "",
        *_table(["capture", "per step vs plain", "first step vs plain"], rows),
    ]


def _autocast_dispatch(data: dict) -> list[str]:
    rows = []
    for op, o in data["ops"].items():
        rows.append([f"`{op}`", o["policy"], o["baseline"], _x(o["cpp_over_baseline"]), _x(o["python_over_cpp"]),
                     "yes" if o["like_for_like"] else "no (the baseline casts nothing)"])
    return [
        f"Ran on {data['machine']}; torch {data['torch']}, torch_xla {data['torch_xla']}; {data['what']}; "
        f"{data['calls']} calls, fastest of {data['repeats']} repeats.",
        "",
        *_table(["op", "policy", "baseline", "C++ kernel / baseline", "Python kernel / C++ kernel", "like for like"], rows),
    ]


def _torch_xla_examples(data: dict) -> list[str]:
    rows, tpu = [], []
    for name, e in data["examples"].items():
        shares = e["shares"]
        rows.append([f"`{name}`", _s(e["wall_seconds"]), f"{shares['other'] * 100:.1f}%", e["rows"], e["rows_without_a_line"]])
        for row in (e.get("real_size") or {}).get("tpu", []):
            tpu.append([f"`{name}`", row["line"], row["kernels"], f"{row['hbm_gib']:.2f} GiB", "yes" if row["fits"] else "no",
                        _s(row["compile_seconds"])])
    return [
        data["what"],
        "",
        f"xlabridge: {data['xlabridge']}.",
        "",
        *_table(["example (shrunk)", "wall", "\"other\" share", "graph rows", "rows without a user line"], rows),
        f"Their TPU view at their own size (`--compile-only`), **compiled for TPU v5e (v5e:2x2) by libtpu "
        f"{re.search(r'by libtpu ([0-9.]+)', data['what'])[1]}, not run**:",
        "",
        *_table(["example", "graph (its line)", "kernels", "HBM per chip", "fits", "libtpu compile"], tpu),
    ]


# -- the MX benchmarks --------------------------------------------------------------------------


def _mx_cast(data: dict) -> list[str]:
    t = data["torch"]
    rows = []
    for s in t["sizes"]:
        if "torchao_floor" not in s:
            continue  # a float32 input timed against the copy alone
        floor, rceil = s["xlabridge_cuda"], s["xlabridge_cuda_rceil"]
        rows.append([f"{s['size_MB']} MB", f"{s['copy']['GBps']:.0f} GB/s", f"{floor['GBps']:.0f} GB/s ({_time(floor['ms'])})",
                     _x(floor["ms_vs_torchao_floor"]), f"{rceil['GBps']:.0f} GB/s", _x(rceil["ms_vs_torchao_rceil"]),
                     _x(floor["speedup_vs_view_first"]), f"{s['torchao_floor']['GBps']:.0f} / {s['torchao_rceil']['GBps']:.0f} GB/s"])
    agreement = [[mode, a["blocks"], a["xlabridge_vs_spec"]["differing_blocks"], a["torchao_vs_spec"]["differing_blocks"],
                  ", ".join(f"{k} {v}" for k, v in a["torchao_vs_spec"]["by_kind"].items())]
                 for mode, a in t.get("agreement_with_torchao", {}).items()]
    jax_rows = []
    for size in data["jax"]["sizes"]:
        by_variant = {r["variant"]: r for r in size["rows"]}
        copy, plain = by_variant.get("copy"), by_variant.get("two_pass")
        pallas = by_variant.get("pallas")
        if copy and plain and pallas:
            jax_rows.append([f"{copy['size_MB']} MB", f"{copy['GBps']:.0f} GB/s", f"{plain['kernel_count']}",
                             f"{plain['GBps']:.0f} GB/s", f"{pallas['kernel_count']}", f"{pallas['GBps']:.0f} GB/s",
                             f"{pallas['vs_copy']:.2f}"])
    jax_version = data["jax"]["sizes"][0]["jax"]
    jax_run = data.get("jax_run")
    out = [
        f"Ran on an {t['device']}; torch {t['torch']}, Triton {t['triton']}, torchao {t['torchao']}, jax {jax_version}; "
        f"xlabridge at {data['commit']}; GPU time from CUDA-graph replays; bf16 `[M, 8192]`. Ratios are of times "
        "in the same run: xlabridge's time over torchao's (below 1: xlabridge faster), and the speed-up over "
        "`torch.compile` of the view-first formulation.",
        "",
        *_table(["input", "copy", "xlabridge floor", "time vs torchao FLOOR", "xlabridge rceil", "time vs torchao RCEIL",
                 "speed-up vs torch.compile", "torchao FLOOR / RCEIL"], rows),
    ]
    if agreement:
        out += ["Bytes on seeded blocks with special values (NaN, ±Inf, subnormals, zeros, saturation, ties), against "
                "the NumPy spec model:", "",
                *_table(["rounding", "blocks", "xlabridge differs from the spec", "torchao differs from the spec",
                         "torchao's differing blocks, by kind"], agreement)]
    if jax_rows:
        rerun = f" (from the run at {jax_run['commit']}: {jax_run['note']})" if jax_run else ""
        out += [f"XLA:GPU through JAX, kernel durations from CUPTI, against a JAX copy timed the same way{rerun}:", "",
                *_table(["input", "JAX copy", "plain ops: kernels", "plain ops", "Pallas kernel: kernels", "Pallas kernel",
                         "Pallas vs copy"], jax_rows)]
    return out


def _mx_cast_cols(data: dict) -> list[str]:
    t = data["torch"]
    c = t["cols"]
    rows = []
    for s in c["sizes"]:
        rows.append([f"{s['size_MB']} MB", _time(s["copy"]["ms"]), _time(s["dim1"]["ms"]), f"{s['dim1']['vs_copy']:.2f}",
                     _x(s["dim1"].get("speedup_vs_torchao_dim1_compiled")), _time(s["both"]["ms"]),
                     _x(s["both"].get("speedup_vs_separate")), _x(s["both"].get("speedup_vs_torchao_both_compiled"))])
    return [
        f"Ran on an {t['device']}; torch {t['torch']}, Triton {t['triton']}, torchao {c['torchao']}; xlabridge at "
        f"{data['commit']}; GPU time from CUDA-graph replays; bf16 `[M, 8192]`; bytes counted as input + outputs. "
        "\"vs copy\" is the cast's bandwidth over the copy's, timed in the same run; speed-ups are time ratios "
        f"in the same run. torchao's own Triton dim1 kernel: {c['torchao_triton_dim1']}.",
        "",
        *_table(["input", "copy", "`to_mxfp8(x, dim=0)`", "vs copy", "speed-up vs torchao `to_mx(x.t())` compiled",
                 "`to_mxfp8_both(x)`", "speed-up vs two casts", "speed-up vs torchao both compiled"], rows),
    ]


def _mx_cast_tpu(data: dict) -> list[str]:
    rows = []
    for r in data["summary"]:
        rows.append([r["generation"], f"{r['size_MB']} MB", r["two_pass"]["kernels"], _x(r["two_pass"]["bytes_vs_ideal"], 1),
                     r["recompute"]["kernels"], _x(r["recompute"]["bytes_vs_ideal"], 1), r["mosaic"]["kernels"],
                     _x(r["mosaic"]["bytes_vs_ideal"], 2)])
    sched = [[g, f"{s['bundles_per_1024_elements']:.2f}", f"{s['unit_bound_bundles_per_1024_elements']['VALU']:.2f}",
              f"{s['unit_bound_bundles_per_1024_elements']['XLU']:.2f}"] for g, s in data.get("static_schedule", {}).items()]
    out = [
        f"**Compiled for TPU v4, v5e, v5p and v6e by libtpu {data['libtpu']}, not run** (jax {data['jax']}; xlabridge at "
        f"{data['commit']}). bf16 input, K = 8192. Bytes are against the ideal traffic (the input read once, the "
        "float8 data and the scale bytes written once): XLA's cost analysis for the plain formulations, the "
        "executable's buffers for the Mosaic kernel.",
        "",
        *_table(["TPU", "input", "`two_pass` kernels", "bytes vs ideal", "`recompute` kernels", "bytes vs ideal",
                 "Mosaic kernels", "bytes vs ideal"], rows),
    ]
    if sched:
        out += ["The Mosaic kernel's vector work, from libtpu's static schedule of its inner loop (VLIW bundles per "
                "1024 elements; the VALU and XLU columns are the least each unit needs):", "",
                *_table(["TPU", "bundles", "VALU bound", "XLU bound"], sched)]
    return out


def _mx_dim1_tune(data: dict) -> list[str]:
    rows = []
    for r in data["again"]:
        best = min(((k, v) for k, v in r.items() if isinstance(v, dict) and "ms" in v and k.startswith("dim1_")),
                   key=lambda kv: kv[1]["ms"])
        rows.append([f"{r['size_MB']} MB", _time(r["copy_ms"]), f"`{best[0]}`", _time(best[1]["ms"]), f"{best[1]['vs_copy']:.3f}"])
    return [
        f"Ran on an {data['device']}; Triton {data['triton']}. {data['note']}",
        "",
        *_table(["round", "copy", "fastest dim1 config", "its time", "bandwidth vs copy"], rows),
    ]


def _mx_dim1_variants(data: dict) -> list[str]:
    copy = data["copy_ms"]
    rows = [["copy", _time(copy), "1.00"], ["the kernel", _time(data["current_ms"]), f"{copy / data['current_ms']:.2f}"]]
    for key, value in data.items():
        if key.startswith("var_") and not key.endswith("_exact") and isinstance(value, float):
            rows.append([f"`{key[4:]}`", _time(value), f"{copy / value:.2f}"])
    return [
        "On an H100 at 256 MB (bf16 16384 × 8192): variants of the column-wise kernel with parts removed "
        "(`scales0`: no scale-byte stores, `compute0`: no block maximum and scaling), the tile loaded already "
        "transposed (`direct1`); bandwidth against the copy timed in the same run.",
        "",
        *_table(["variant", "time", "bandwidth vs copy"], rows),
    ]


def _mx_dim1_profile(text: str) -> list[str]:
    rows = []
    kernel = None
    for line in text.splitlines():
        head = re.match(r"^  (\S+) \(", line)
        if head:
            kernel = head[1].split("<")[0]
        metric = re.match(r"^\s+(dram__bytes_read\.sum|dram__bytes_write\.sum|dram__throughput\.avg\.pct_of_peak_sustained_elapsed|gpu__time_duration\.sum)\s+(\S+)\s+(\S+)$", line)
        if metric and kernel and kernel.startswith("mxfp8"):
            rows.append([f"`{kernel}` #{sum(1 for r in rows if r[1] == metric[1]) + 1}", metric[1], f"{metric[3]} {metric[2]}"])
    return [
        "Nsight Compute on an H100: one launch each of the column-wise kernel with its loads marked "
        "`evict_last` (first) and `evict_first` (second), bf16 16384 × 8192 (the whole report is the results file).",
        "",
        *_table(["kernel launch", "metric", "value"], rows),
    ]


def _mx_linear_train(data: dict) -> list[str]:
    t = data["train"]
    linear = t["linear_sqnr_db"]
    return [
        f"Ran on an {t['device']}; torch {t['torch']}; {t['steps']} AdamW steps under bf16 autocast of "
        f"`{json.dumps(t['model'])}`, every linear swapped for `MXLinear`, from the same weights on the same "
        "batches as the bf16 run (the baseline).",
        "",
        *_table(["measure", "value"], [
            ["loss curve SQNR against bf16", f"{t['loss_curve_sqnr_db']:.1f} dB"],
            ["largest per-step relative difference", f"{t['max_step_relative_difference'] * 100:.1f}%"],
            ["mean relative difference, last 50 steps", f"{t['mean_relative_difference_last_50'] * 100:.1f}%"],
            ["final loss (bf16 / MXFP8)", " / ".join(f"{v:.3f}" for v in t["final_loss"].values())],
            ["one linear: SQNR of output / grad input / grad weight", " / ".join(f"{v:.1f} dB" for v in linear.values() if isinstance(v, (int, float)))],
        ]),
        *_torchao_training(t.get("torchao_training")),
    ]


def _torchao_training(run: dict | None) -> list[str]:
    """torchao's own MX training beside xlabridge's, where the results file records it."""
    if not run:
        return []
    if "not_run" in run:
        return [f"torchao {run['torchao']}'s MX training (`torchao.prototype.moe_training`, `MXFP8TrainingOpConfig`) "
                f"did not run on this torch: {run['not_run']}", ""]
    return [f"torchao {run['torchao']}'s MX training: " + ", ".join(f"{k} {v}" for k, v in run.items() if k != "torchao"), ""]


def _mx_linear_train_tpu(data: dict) -> list[str]:
    t = data["tpu"]
    rows = []
    for key, r in t.items():
        if not isinstance(r, dict):
            continue
        graph, dtype, generation = key.split("/")
        rows.append([graph, dtype, generation, r["kernels"], r["tpu_custom_calls"], f"{r['hbm_total_MiB']:.0f} MiB"])
    libtpu = t.get("libtpu") or data.get("libtpu")
    # Runs before the script recorded libtpu's version: requirements/dev.txt pinned 0.0.23 then.
    by = f"libtpu {libtpu}" if libtpu else "libtpu 0.0.23 (the pinned one; this results file does not record it)"
    return [
        f"**Compiled for TPU v5e and v6e by {by}, not run**, through torch_xla with the TPU lowering "
        "(`xlabridge.hlo.kernel_count(..., target=...)`): the forward and backward of one linear and a "
        "transformer training step, bf16 against MXFP8 (the baseline is the bf16 graph).",
        "",
        *_table(["graph", "dtype", "TPU", "kernels", "Mosaic calls", "HBM per device"], rows),
    ]


def _mx4_cast_tpu(data: dict) -> list[str]:
    rows = [[r["generation"], r["variant"], f"{r['size_MB']} MB", r["kernel_count"], f"{r['buffer_bytes_vs_ideal']:.4f}",
             ", ".join(k for k in r["kernels"] if k != "custom-call/tpu_custom_call") or "-"]
            for r in data["cast"]]
    matmul = [[r["generation"], r["shape"], r["tokens"], r["variant"], r["kernel_count"],
               f"{r['weight_bytes_per_parameter']:.3f}", _time(r["cost_model_s"] * 1e3) if r.get("cost_model_s") else "-"]
              for r in data["matmul"]]
    pinned = any(r.get("pin_hbm") for r in data["cast"] + data["matmul"])
    return [
        f"**Compiled for TPU by libtpu {data['libtpu']}, not run** (jax {data['jax']}; xlabridge at {data['commit']}). "
        "MXFP4 cast and dequantization of bf16 `[M, 8192]`: kernels and the executable's buffer bytes against the "
        "ideal traffic (input read once, packed data and scale bytes written once). Kernels other than the Mosaic "
        "call are listed (`copy-start`: an input XLA:TPU prefetches into VMEM before the kernel)."
        + (" The Mosaic kernels' operands and results are pinned to HBM (`xlabridge/mx/_mosaic/hbm.py`): unpinned, "
           "this XLA colors them VMEM where they fit and prefetches them." if pinned else ""),
        "",
        *_table(["TPU", "operation", "input", "kernels", "bytes vs ideal", "other kernels"], rows),
        "The fused MXFP4 linear beside the bf16 matmul of the dequantized weight (the cost model's time; for the "
        "Mosaic kernel XLA cannot see inside, the bytes and flops the kernel declares):",
        "",
        *_table(["TPU", "shape", "tokens", "variant", "kernels", "weight bytes per parameter", "cost model time"], matmul),
    ]


def _gpt_oss_tpu(data: dict) -> list[str]:
    def refusal(r: dict) -> str:
        first = (r.get("out_of_memory") or "").split("\n", 1)[0]
        return first.split("error. ", 1)[-1] if first else ""

    rows = [[r["generation"], r["tokens"], r["experts"], r["kernel_count"] or "-",
             f"{r['total_hbm_bytes'] / 2**30:.2f} GiB" if r.get("total_hbm_bytes") else "-",
             "yes" if r["fits"] else "no", refusal(r)] for r in data["model"]]
    return [
        f"**Compiled for TPU by libtpu {data['libtpu']}, not run** (jax {data['jax']}; xlabridge at {data['commit']}). "
        f"gpt-oss-20b's decode step from its public config ({data['parameters_mxfp4'] / 1e9:.1f}B parameters): weights "
        f"{data['weight_bytes_mxfp4'] / 1e9:.2f} GB with MXFP4 experts, {data['weight_bytes_bf16'] / 1e9:.2f} GB all "
        "bf16; one chip.",
        "",
        *_table(["TPU", "tokens", "experts", "kernels", "HBM needed", "fits", "XLA:TPU's refusal"], rows),
    ]


def _mx4_cast(data: dict) -> list[str]:
    rows = [[f"{r['size_MB']} MB", f"{r['copy']['GBps']:.0f} GB/s", f"{r['cast_floor']['vs_copy']:.2f}",
             f"{r['cast_rceil']['vs_copy']:.2f}", f"{r['dequantize']['vs_copy']:.2f}"] for r in data["sizes"]]
    summary = data["summary"]
    return [
        f"Ran on an {data['device']}; torch {data['torch']}, Triton {data['triton']}; xlabridge at {data['commit']}; GPU "
        "time from CUDA-graph replays; bf16 `[M, 8192]`. Bandwidth over the copy's, timed in the same run (the cast "
        "counts the input read and the packed data and scale bytes written; the copy its read and write). One Triton "
        f"launch per cast: {'yes' if summary['one_kernel_per_cast'] else 'no'}; per dequantization: "
        f"{'yes' if summary['one_kernel_per_dequantize'] else 'no'}.",
        "",
        *_table(["input", "copy", "cast floor vs copy", "cast rceil vs copy", "dequantize vs copy"], rows),
    ]


def _packing_said(data: dict) -> str:
    """What the run's MXFP4 weights were laid out as (runs before ``--packing`` read the spec's)."""
    if data.get("packing") == "decode":
        return "The MXFP4 weights repacked once for the decoder (`Packing.DECODE`), as a server packs them at load. "
    return "The MXFP4 weights in the spec's (checkpoint) layout. "


def _mx4_linear(data: dict) -> list[str]:
    copy = data.get("copy_GBps")
    gemlite: dict[tuple, dict] = {}
    for r in (data.get("gemlite") or {}).get("rows", []):
        if "ms" in r:
            gemlite[(r["shape"], r["tokens"], r["path"])] = r
    rows = []
    for r in data["rows"]:
        dense = r.get("bf16_linear_ms", r.get("bf16_bmm_ms"))
        g_mx, g_int = gemlite.get((r["shape"], r["tokens"], "mxfp4")), gemlite.get((r["shape"], r["tokens"], "int4 g32"))
        shape = r["shape"] + (f" ({r['experts_read']} experts × {r['rows_per_expert']} rows)" if "experts_read" in r else "")
        error = f"{r['max_error_ulps']:.1f}"
        if "bf16_max_error_ulps" in r:
            error += f" / {r['bf16_max_error_ulps']:.1f}"
        if r.get("within_bound") is False:
            error += " ✗"
        rows.append([shape, r["tokens"], _time(r["fused_ms"]), _time(dense), _x(r["speedup"]),
                     "-" if r.get("weight_read_share") is None else f"{r['weight_read_share']:.2f}",
                     _PATHS.get(r.get("path"), "-"),
                     _gemlite(g_mx), _gemlite(g_int), error])
    skipped = (data.get("gemlite") or {}).get("error")
    return [
        f"Ran on an {data['device']}; torch {data['torch']}, Triton {data['triton']}; xlabridge at {data['commit']}. "
        + _packing_said(data) +
        "The MXFP4 linear (the weight read as MXFP4 bytes, 0.53 bytes per parameter, by whichever the first call's "
        "timing found fastest for the shape: the CUDA decode kernel (\"CUDA\"), the Triton kernel (\"Triton\"), "
        "or the weight dequantized and multiplied) against `torch.nn.functional.linear` "
        "(`torch.bmm` for the experts) on the bf16 dequantized weight, each reading its weight from HBM (copies "
        "rotated past L2), in one run"
        + (f"; a 1 GiB device copy ran at {copy:.0f} GB/s in the same run, and \"share\" is the MXFP4 weight's "
           "bytes over the time as a share of it" if copy else "")
        + ". gemlite's MXFP4 and int4 (32-element groups) paths timed the same way in the same run, for as long as "
        "the run gave them (\"-\": not reached)"
        + (f" (not run: {skipped})" if skipped else "")
        + "; ✗ marks a result outside the tests' error bound (a bf16 rounding of each output plus 2^-16 of the "
        "largest), for gemlite's int4 path against the float64 product of the weight as its inputs define it. "
        "Error: the largest distance from the float64 product, in bf16 ulps of each output, MXFP4 / bf16 `linear` "
        "(outputs near zero, left by cancellation, give the large figures, to both alike).",
        "",
        *_table(["shape", "tokens", "MXFP4", "bf16", "speed-up", "share", "path", "gemlite MXFP4", "gemlite int4",
                 "error (ulps)"], rows),
    ]


_PATHS = {"CUDA decode kernel": "CUDA", "CUDA warpgroup kernel": "CUDA wgmma", "Triton fused kernel": "Triton",
          "fused kernel": "Triton", "dequantize + matmul": "dequantize"}


def _decode_config(c: dict) -> str:
    """A decode kernel configuration in a few words: row tiles, warps, and how loads stay in flight."""
    if c.get("kernel") == "fp4_wgmma":
        ring = f"{c['stages']}×{c['group']} spans" if c.get("group", 1) > 1 else f"{c['stages']}"
        return (f"wgmma {64 * c['wg']}r, ring {ring}, split-K to {c['per_sm']}/SM"
                + (f" ≥{c['min_blocks']}/SM" if c.get("min_blocks", 1) > 1 else "")
                + (", pairs" if c.get("pipeline") == "pairs" else "")
                + (f", x in {c['slots']}" if c.get("slots", 4) != 4 else "")
                + (", sums in a cluster" if c.get("sums") == "cluster" else ""))
    how = (f"ring {c['stages']}" + (" x" if c.get("x_async") else "")) if c.get("stages") else \
        f"{c['spans']} span" + ("s" if c["spans"] > 1 else "") + (" +next" if c.get("double") else "")
    extra = ((" paired x" if c.get("x_paired") else "") + (" x late" if c.get("x_early") is False else "")
             + (f" ≥{c['min_blocks']}/SM" if c.get("min_blocks", 1) > 1 else "")
             + (f", x's slice of {c['x_spans']} spans shared" if c.get("x_spans") else "")
             + (f", K split in {c['k_spans']} spans a CTA" if c.get("k_spans") else ""))
    return f"{16 * c['rt']}×{c['wn']}r {c['wk']}k, {how}{extra}"


def _mx4_decode_sweep(data: dict) -> list[str]:
    rows = []
    for r in data["rows"]:
        if "best_ms" not in r:
            continue
        shape = r["shape"] + (f" ({r['experts_read']} experts)" if "experts_read" in r else "")
        tokens = r.get("token_count", r["tokens"])
        timed = sum(1 for c in r["configs"] if "ms" in c)
        rows.append([shape, tokens, _time(r["bf16_ms"]), _time(r["best_ms"]), _x(r["speedup"]),
                     f"{r['weight_read_share']:.2f}", _decode_config(r["best"]), f"{timed}", f"{r['wrong']}"])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}. Every configuration of "
        + ("the CUDA warpgroup kernel " if "--kernels wgmma" in data.get("command", "") else "the CUDA decode kernel ")
        + f"({data['kernels']} kernels, compiled by NVRTC in {data['compile_seconds']:.0f} s) timed on each shape and "
        "token count against bf16 `linear` (`bmm` for the experts) in the same run, as `mx4_linear.py` times them "
        f"(CUDA-graph replays, weights rotated past L2; a 1 GiB copy ran at {data['copy_GBps']:.0f} GB/s, and "
        "\"share\" is the MXFP4 weight's bytes over the fastest time as a share of it), each result checked against "
        "the float64 product (\"outside the bound\": configurations whose result was not within it). The "
        "configuration: weight rows per warp × warps along N, warps along K, and how loads stay in flight (spans of "
        "128 elements a step in registers, \"+next\": the next step's issued first; or a ring of stages in shared "
        "memory, \"x\": x through it too); for the warpgroup kernel, weight rows per CTA, the weight's ring and the "
        "CTAs per SM that K is split across CTAs for.",
        "",
        *_table(["shape", "tokens", "bf16", "fastest", "speed-up", "share", "fastest configuration", "timed",
                 "outside the bound"], rows),
    ]


def _fastest(row: dict, keep=lambda c: True) -> float | None:
    """The fastest time among ``row``'s configurations within the bound that ``keep`` keeps."""
    times = [c["ms"] for c in row["configs"] if c.get("within_bound") and "ms" in c and keep(c)]
    return min(times) if times else None


def _shape_of(row: dict) -> str:
    return row["shape"] + (f" ({row['experts_read']} experts)" if "experts_read" in row else "")


def _mx4_launch_sweep(data: dict) -> list[str]:
    rows = []
    for r in data["rows"]:
        plain, dependent = _fastest(r, lambda c: not c["dependent"]), _fastest(r, lambda c: c["dependent"])
        if plain is None or dependent is None:
            continue
        rows.append([_shape_of(r), r.get("token_count", r["tokens"]), _time(r["bf16_ms"]), _time(plain),
                     _time(dependent), f"{1000 * (plain - dependent):.1f} µs"])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}. The tuning's CUDA candidates (`fp4_matmul.DECODE`) on "
        "each shape and token count, each launched plainly and launched to overlap the kernel before it "
        "(programmatic dependent launch), timed as `mx4_linear.py` times them: CUDA-graph replays of one call after "
        "another over weights rotated past L2, so that the kernel before each is the call before. The fastest "
        "candidate each way, and what the dependent launch saves:",
        "",
        *_table(["shape", "tokens", "bf16", "plain", "dependent", "saved"], rows),
    ]


def _fastest_rows(data: dict, keeps: list) -> list[list[object]]:
    """Per row of a sweep with a configuration that ``keeps[0]`` keeps: shape, tokens, bf16's time, and
    the fastest time among the configurations each of ``keeps`` keeps ("-": none)."""
    rows = []
    for r in data["rows"]:
        cells = [_fastest(r, keep) for keep in keeps]
        if cells[0] is not None:
            rows.append([_shape_of(r), r.get("token_count", r["tokens"]), _time(r["bf16_ms"])]
                        + [_time(c) if c is not None else "-" for c in cells])
    return rows


def _mx4_wgmma_variants(data: dict) -> list[str]:
    rows = _fastest_rows(data, [lambda c: not c["halves"], lambda c: c["halves"],
                                *(lambda c, n=n: c["slots"] == n for n in (2, 3, 4))])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}; {data['note']}. The fastest configuration with each "
        "span's MMAs in one group and in two, and with each ring of `x` (two or three slots only up to 32 tokens):",
        "",
        *_table(["shape", "tokens", "bf16", "one group", "two groups", "2 slots", "3 slots", "4 slots"], rows),
    ]


def _mx4_wgmma_pipelines(data: dict) -> list[str]:
    pairs = lambda c: c.get("pipeline") == "pairs"  # noqa: E731
    rows = _fastest_rows(data, [lambda c: not pairs(c), pairs,
                                *(lambda c, n=n: pairs(c) and c["slots"] == n for n in (2, 3, 4))])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}. Every configuration of the warpgroup kernel, the "
        "fastest within the bound per pipeline: a whole span decoded and then its MMAs issued (span), or two K "
        "chunks decoded while the MMAs of the two before run (pairs), with x's ring of 2, 3 or 4 slots:",
        "",
        *_table(["shape", "tokens", "bf16", "span", "pairs", "pairs, 2 slots", "3 slots", "4 slots"], rows),
    ]


def _mx4_read_pattern(data: dict) -> list[str]:
    cells: dict[tuple, dict] = {}
    for r in data["rows"]:
        key = (r["shape"], r["wg"], r["stages"], r.get("group", 1), r["per_sm"])
        cells.setdefault(key, {"ctas": r["ctas"]})[r["layout"]] = r
    rows = [[shape, 64 * wg, f"{stages} × {group}", per_sm, c["ctas"],
             *(f"{_time(c[lay]['ms'])} ({c[lay]['share']:.2f}, {c[lay]['resident']}/SM)" if lay in c else "-"
               for lay in ("rows", "tiles"))]
            for (shape, wg, stages, group, per_sm), c in cells.items()]
    return [
        f"Ran on an {data['device']}; torch {data['torch']}; a 1 GiB copy ran at {data['copy_GBps']:.0f} GB/s. The "
        "warpgroup kernel's weight copies alone (nothing decoded, no MMA) on the weight as stored (rows) and packed "
        "per 64-row tile and span (tiles), per CTA size, ring (stages × spans a stage, copied together) and split-K "
        "aim: the time, and in brackets the read rate as a share of the copy's and the CTAs an SM holds:",
        "",
        *_table(["shape", "rows a CTA", "ring", "split-K to /SM", "CTAs", "as stored", "tiles"], rows),
    ]


def _mx4_wgmma_trace(data: dict) -> list[str]:
    rows = []
    for r in data["rows"]:
        c = r["config"]
        shares = r["loop_shares"]
        config = _decode_config({"kernel": "fp4_wgmma", **c})
        per_sm = ", ".join(f"{k}/SM: {n} SMs" for k, n in r["ctas_per_sm"].items())
        tiled = r.get("tiled")
        rows.append([r["shape"], r["tokens"], config, _time(r["ms"]), _time(r["traced_ms"]), f"{r['ctas']} ({per_sm})",
                     f"{r['start_us_p0_50_90_100'][3]:.1f}", f"{r['prologue_us_p50']:.1f}",
                     f"{r['loop_ns_per_span_p50']:.0f} ns × {r['spans_p50']:.0f}",
                     " / ".join(f"{shares[k]:.2f}" for k in ("weight", "x", "mma", "scale")),
                     f"{r['epilogue_us_last_p50'] or 0:.1f} / {r['epilogue_us_other_p50'] or 0:.1f}",
                     f"{r['span_us']:.1f}",
                     _time(r["tiled_ms"]) + ("" if r.get("tiled_bits_equal", True) else " ✗") if "tiled_ms" in r else "-",
                     f"{tiled['loop_ns_per_span_p50']:.0f} ns" if tiled else "-"])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}"
        + (f"; xlabridge at {data['commit']}" if data.get("commit") else "")
        + ". Each configuration's plain build and its traced build "
        "(`fp4_wgmma`'s `trace`: one thread a CTA records the global timer and the SM's cycles) timed as "
        "`mx4_linear.py` times them; from the traced build's last replay: CTAs (and how many SMs ran 1, 2, ... of "
        "them, by CTAs an SM ran), the last CTA's start after the first's (µs), the prologue (µs, median), the main loop's time per "
        "span × spans, its cycles waiting for the weight / x / the MMAs / the scale bytes (shares of the loop), "
        "the split-K epilogue of a tile's last CTA / of the others (µs) and the kernel's span from the first start "
        "to the last end (µs); and the build reading the weight packed per tile and span (✗: not the same bits):",
        "",
        *_table(["shape", "tokens", "configuration", "time", "traced", "CTAs (per SM: SMs)", "last start", "prologue",
                 "loop", "waits w / x / mma / scale", "epilogue", "span", "tiled", "tiled loop"], rows),
    ]


def _mx4_wgmma_sums(data: dict) -> list[str]:
    cluster = lambda c: c.get("sums") == "cluster"  # noqa: E731
    rows = _fastest_rows(data, [lambda c: not cluster(c), cluster,
                                *(lambda c, w=w: cluster(c) and c["wg"] == w for w in (1, 2))])
    wrong = sum(r["wrong"] for r in data["rows"])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}; {data['note']}. Every configuration of the warpgroup "
        "kernel (its scale bytes loaded two spans ahead), the fastest within the bound with a split's partial sums "
        "added through global memory (the last CTA of a row tile reads them back from L2) and through the shared "
        "memory of a thread block cluster of the tile's splits (8 at most), with one and two warpgroups a CTA"
        + (f" ({wrong} results outside the bound, all of them two-warpgroup cluster configurations of that build)"
           if wrong else "") + ":",
        "",
        *_table(["shape", "tokens", "bf16", "global sums", "cluster sums", "cluster, 1 warpgroup", "2 warpgroups"], rows),
    ]


def _mx4_late_x(data: dict) -> list[str]:
    early = lambda c: c.get("stages") == 0 and c.get("x_early") is None  # noqa: E731
    late = lambda c: c.get("stages") == 0 and c.get("x_early") is False  # noqa: E731
    rows = _fastest_rows(data, [lambda c: True, early, late,
                                lambda c: early(c) and c["double"], lambda c: late(c) and c["double"]])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}. Every configuration of the CUDA decode kernel at 8 and "
        "16 tokens, its register path's x loaded with the weight (early: into registers, two spans' worth with the "
        "next step's loads issued first) or read through L1 as the arithmetic reaches it (late: double buffering "
        "then holds the weight alone, fewer registers): the fastest within the bound of all, of each, and of each "
        "with the next step's loads issued first:",
        "",
        *_table(["shape", "tokens", "bf16", "fastest", "x early", "x late", "early, +next", "late, +next"], rows),
    ]


def _mx4_balance(data: dict) -> list[str]:
    decode = lambda c: c.get("kernel") == "fp4_decode"  # noqa: E731
    rows = _fastest_rows(data, [lambda c: decode(c) and not c.get("balance"), lambda c: decode(c) and c.get("balance")])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}; xlabridge at {data['commit']}. The tuning's decode "
        "candidates, one row tile a CTA, and their twins launched as a balanced grid (as many CTAs as the SMs hold, "
        "each an even share of the row tiles one after another, so that no SM holds a CTA more than another): the "
        "fastest of each within the bound:",
        "",
        *_table(["shape", "tokens", "bf16", "one tile a CTA", "balanced"], rows),
    ]


def _mx4_family(field: str, what: str):
    """A renderer for a sweep of one family of decode configurations (those with ``field`` set) beside
    the tuning's candidates: per shape and token count, the fastest of each and the family's fastest
    configuration."""
    def render(data: dict) -> list[str]:
        family = lambda c: c.get("kernel") == "fp4_decode" and bool(c.get(field))  # noqa: E731
        rows = []
        for r in data["rows"]:
            ours, theirs = _fastest(r, family), _fastest(r, lambda c: not family(c))
            if ours is None or theirs is None:
                continue
            best = min((c for c in r["configs"] if family(c) and c.get("within_bound") and "ms" in c),
                       key=lambda c: c["ms"])
            rows.append([_shape_of(r), r.get("token_count", r["tokens"]), _time(r["bf16_ms"]), _time(theirs),
                         _time(ours), _x(theirs / ours), _decode_config(best)])
        return [
            f"Ran on an {data['device']}; torch {data['torch']}; xlabridge at {data['commit']}. {what}, every "
            "configuration timed beside the tuning's candidates (`fp4_matmul.DECODE`) on `Packing.DECODE` weights, "
            "as `mx4_linear.py` times them; the fastest of each within the bound, and the family's fastest "
            "configuration (\"speed-up\": the candidates' time over the family's):",
            "",
            *_table(["shape", "tokens", "bf16", "candidates", "family", "speed-up", "family's fastest"], rows),
        ]
    return render


def _family_sweeps(family: str, field: str, title: str, measures: str, what: str) -> list["Benchmark"]:
    """The two sweeps ``mx4_round.sh`` makes of a decode-kernel family (``--kernels family``): 16 tokens
    on the single-weight shapes, and 32 and 64 on gpt-oss's projections and Llama 4096x4096."""
    render = _mx4_family(field, what)
    command = f"tools/bench/mx4_decode_sweep.py --kernels {family},candidates --packing decode --tokens"
    return [Benchmark(f"mx4_{family}_16_h100.json", f"{command} 16", f"{title}: not kept", f"{measures}, at 16 tokens.",
                      render),
            Benchmark(f"mx4_{family}_32_64_h100.json", f"{command} 32,64", f"{title} at 32 and 64 tokens: not kept",
                      "The same family on gpt-oss's projections and Llama 4096x4096 at 32 and 64 tokens.", render)]


def _mx4_packing(data: dict) -> list[str]:
    spec = lambda c: c.get("packing", "spec") == "spec"  # noqa: E731
    keeps = [spec, lambda c: not spec(c), lambda c: spec(c) and c["kernel"] == "fp4_decode",
             lambda c: not spec(c) and c["kernel"] == "fp4_decode"]
    rows = []
    for r in data["rows"]:
        cells = [_fastest(r, keep) for keep in keeps]
        if cells[0] is None:
            continue
        ratio = f"{cells[0] / cells[1]:.2f}" if cells[1] is not None else "-"
        rows.append([_shape_of(r), r.get("token_count", r["tokens"]), _time(r["bf16_ms"])]
                    + [_time(c) if c is not None else "-" for c in cells] + [ratio])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}; {data.get('note') or 'xlabridge at ' + data['commit']}. "
        "The tuning's candidates on the weight in the spec's layout and repacked (`Packing.DECODE`: eight integer operations a word where "
        "the spec's layout takes thirteen, and `x` taken as it is, where the spec's pairs need byte permutes or a "
        "launch that reorders it): the fastest of each within the bound, all candidates and the mma.sync decode "
        "kernel's alone, and how many times faster the packed weight's fastest is:",
        "",
        *_table(["shape", "tokens", "bf16", "spec", "decode", "spec, mma.sync", "decode, mma.sync", "spec / decode"],
                rows),
    ]


def _mx4_wgmma_cluster(data: dict) -> list[str]:
    rows = _fastest_rows(data, [lambda c, n=n: c["cluster"] == n for n in (1, 2, 4)])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}; {data['note']}. The fastest configuration per "
        "cluster size (1: no cluster, the kernel as kept):",
        "",
        *_table(["shape", "tokens", "bf16", "1 CTA", "2 CTAs", "4 CTAs"], rows),
    ]


def _mx4_prefetch_sweep(data: dict) -> list[str]:
    spans = sorted(data["runs"], key=int)
    first = data["runs"][spans[0]]
    rows = []
    for i, r in enumerate(first["rows"]):
        cells = [_fastest(data["runs"][n]["rows"][i]) for n in spans]
        best = min(c for c in cells if c is not None)
        rows.append([_shape_of(r), r.get("token_count", r["tokens"]), _time(r["bf16_ms"])]
                    + [(f"**{_time(c)}**" if c == best else _time(c)) if c is not None else "-" for c in cells])
    return [
        f"Ran on an {data['device']}; torch {data['torch']}; {data['note']}. The tuning's CUDA candidates, launched "
        "dependently, with each CTA bringing the first n spans of its weight rows into L2 before the kernel before "
        "it ends (`PREFETCH_SPANS`; 0: none), the fastest candidate per value (bold: the fastest of the row):",
        "",
        *_table(["shape", "tokens", "bf16", *(f"n = {n}" for n in spans)], rows),
    ]


def _mx4_decode_probe(data: dict) -> list[str]:
    names = list(data["rows"][0]["variants"]) if data["rows"] else []
    labels = sorted({n.split(" / ")[0] for n in names}, key=[n.split(" / ")[0] for n in names].index)
    rows = []
    for r in data["rows"]:
        for label in labels:
            cells = [r["variants"].get(f"{label} / {what}") for what in ("as built", "loads only", "arithmetic only")]
            rows.append([r["shape"], r["tokens"], _time(r["bf16_ms"]), label]
                        + [_time(c["ms"]) if c else "-" for c in cells])
    return [
        f"Ran on an {data['device']}. Configurations of the CUDA decode kernel as built, with the loads only (the "
        "words folded into the result, nothing decoded) and with the arithmetic only (made-up words, no weight "
        "loads), beside bf16 `linear` in the same run; CUDA-graph replays over weights rotated past L2. Where "
        "\"as built\" is near the larger of the other two, loads and arithmetic overlap; near their sum, they "
        "take turns.",
        "",
        *_table(["shape", "tokens", "bf16", "configuration", "as built", "loads only", "arithmetic only"], rows),
    ]


def _gemlite(row: dict | None) -> str:
    if not row:
        return "-"
    return _time(row["ms"]) + (" ✗" if row.get("within_bound") is False else "")


def _mx4_sweep(data: dict) -> list[str]:
    best = []
    for r in data["linear"]:
        timed = [c for c in r["configs"] if "ms" in c]
        fastest = min(timed, key=lambda c: c["ms"]) if timed else None
        if fastest:
            best.append([r["shape"], r["tokens"], f"`{fastest['config']}`", _time(fastest["ms"]), _x(r["bf16_ms"] / fastest["ms"])])
    return [
        f"Ran on an {data['device']}; Triton {data['triton']}; xlabridge at {data['commit']} ({data['note']}). The "
        "fastest of the swept configurations of the fused linear per shape (mode, BN, BK, warps, stages, programs "
        "per SM, and, where recorded, the steps ahead that the scale bytes are prefetched) and its speed-up over bf16 "
        "in the same run:",
        "",
        *_table(["shape", "tokens", "config", "time", "vs bf16"], best),
        *_mx4_probe(data.get("probe")),
    ]


def _mx4_probe(probe: dict | None) -> list[str]:
    if not probe:
        return []
    rows = [[name, f"{m['Duration']:.1f} µs", f"{m['DRAM Throughput']:.0f}%", f"{m['Achieved Occupancy']:.1f}%",
             f"{m['Issued Warp Per Scheduler']:.2f}", f"{m['L2 Hit Rate']:.0f}%"] for name, m in probe["ncu"].items()]
    return [
        f"Nsight Compute on one launch each, at xlabridge {probe['commit']} ({probe['note']}):",
        "",
        *_table(["kernel", "duration", "DRAM throughput", "occupancy", "issued per scheduler", "L2 hits"], rows),
    ]


BENCHMARKS = (
    Benchmark("compile_time.json", "tools/bench/compile_time.py", "First-call compile time in inference",
              "The first compiled call of each model under `torch.no_grad()`, in a fresh process each, "
              "`backend=\"openxla\"` against `backend=\"xlabridge\"` (which compiles inference graphs forward-only).",
              _compile_time),
    Benchmark("compile_time_tpu.json", "tools/bench/compile_time.py --part tpu", "The same graphs on the TPU compiler",
              "The XLA graphs of the same first call, captured per path (AOTAutograd, forward-only) and compiled by "
              "libtpu for TPU v5e; beside them the same call's XLA:CPU compile seconds.",
              _compile_time_tpu),
    Benchmark("import_time.json", "tools/bench/import_time.py", "What importing xlabridge costs",
              "`import xlabridge` (and `import xlabridge.backend`, what `backend=\"xlabridge\"` loads at the first "
              "compile) after `import torch`, each timed in the same fresh interpreter.",
              _import_time),
    Benchmark("diagnostics_overhead.json", "tools/bench/diagnostics_overhead.py", "What observing costs",
              "Training steps of real models compiled with `backend=\"xlabridge\"` inside `xlabridge.diagnose()` "
              "against plain `backend=\"openxla\"`: the first call and the steady state.",
              _diagnostics_overhead),
    Benchmark("long_runs.json", "tools/bench/long_runs.py", "Long runs",
              "The event log's size and the report's build time at 100 and at 10,000 steps: what repeats every "
              "step is summed, so the log grows with distinct graphs, recompiles and findings, not with steps.",
              _long_runs),
    Benchmark("pod_capture_overhead.json", "tools/bench/pod_capture_overhead.py", "What capturing a sharded run costs",
              "Each way `--pod` can capture a lazily traced, tensor-parallel training loop, against a plain run.",
              _pod_capture_overhead),
    Benchmark("diagnostics_overhead_gpu.json", "tools/bench/diagnostics_overhead_gpu.py",
              "What the report costs a GPU training loop",
              "A 6-layer transformer trained with `torch.compile` (inductor) on CUDA, plain and under "
              "`xlabridge report`, in alternating pairs of processes.", _diagnostics_overhead_gpu),
    Benchmark("gpu_report_check.json", "tools/bench/check_gpu_report.py --json", "The report of a GPU training loop against its clock",
              "The same training loop under `xlabridge report --json`: the time split's shares of its process beside "
              "the loop's own step times; the check holds when \"other\" is at most 10% of the wall, tracing and "
              "backend compile fit within the first step (at least 60% of it), execution is at least half the later "
              "steps, the backend is named `inductor` and the timeline has backend-compile, execute and device lanes.",
              _gpu_report_check),
    Benchmark("gpu_report_check_warm.json", "tools/bench/check_gpu_report.py --json (again, same inductor cache)",
              "The report of a warm-cache GPU training loop",
              "The same loop run a second time with the first run's inductor cache: every graph comes from the cache, "
              "so the process's time is imports, tracing, execution and exit (inductor's compile-worker pool).",
              _gpu_report_check),
    Benchmark("torchrun_shares.json", "tools/bench/torchrun_shares.py --nproc 2", "torchrun DDP and FSDP2 on GPUs, rank by rank",
              "A DDP job (the model compiled whole) and an FSDP2 job (each block compiled with `Module.compile()`, then "
              "sharded) under `xlabridge report`, `torchrun --standalone --nproc_per_node 2` with NCCL, cold and warm "
              "inductor caches: each process's \"other\" share and its largest shares.", _torchrun_shares),
    Benchmark("torchrun_shares_cpu.json", "tools/bench/torchrun_shares.py --nproc 2 (no GPU)",
              "torchrun DDP and FSDP2 on the CPU, rank by rank",
              "The same jobs with gloo on this machine's CPU.", _torchrun_shares),
    Benchmark("torch_xla_examples.json", "tools/torch_xla_examples/summarize.py", "torch_xla's own examples",
              "torch_xla's example scripts run unmodified under `xlabridge report --tpu v5e:2x2`: whether every "
              "row names a user line, the \"other\" share, and their TPU view at their own size.",
              _torch_xla_examples),
    Benchmark("autocast_dispatch.json", "tools/bench/autocast_dispatch.py", "Autocast dispatch cost",
              "Per traced call under `torch.autocast(\"xla\", bfloat16)`: xlabridge's C++ AutocastXLA kernels against "
              "torch_xla's own (or none), and the Python fallback against the C++ kernels.",
              _autocast_dispatch),
    Benchmark("mx_cast.json", "tools/bench/mx_cast.py", "MXFP8 cast on CUDA",
              "`to_mxfp8` on a CUDA GPU against a copy, torchao's `to_mx` under `torch.compile` (FLOOR and RCEIL) and "
              "`torch.compile` of the plain formulation, 1 MB to 1 GB.",
              _mx_cast),
    Benchmark("mx_cast_cols.json", "tools/bench/mx_cast.py --cols-only", "MXFP8 column-wise and both-layouts casts on CUDA",
              "`to_mxfp8(x, dim=0)` and `to_mxfp8_both(x)` against a copy, two separate casts, and torchao's "
              "`to_mx` compiled on the transposed tensor.",
              _mx_cast_cols),
    Benchmark("mx_dim1_tune.json", "tools/bench/mx_dim1_tune.py", "Column-wise kernel configurations",
              "Tiles, warps and load eviction hints of the column-wise kernel, each checked byte for byte, the "
              "fastest re-timed next to a copy.",
              _mx_dim1_tune),
    Benchmark("mx_dim1_variants.json", "tools/bench/mx_dim1_variants.py", "Where the column-wise kernel's time goes",
              "Variants of the column-wise kernel with parts removed, at 256 MB.", _mx_dim1_variants),
    Benchmark("mx_dim1_profile.txt", "tools/bench/mx_dim1_profile.py", "The column-wise kernel under Nsight Compute",
              "DRAM bytes and throughput of the column-wise kernel with each load eviction hint.",
              _mx_dim1_profile),
    Benchmark("mx_cast_tpu.json", "tools/bench/mx_cast_tpu.py", "MXFP8 cast compiled for TPU",
              "The plain formulations (through JAX) against the Mosaic kernel, compiled for each TPU generation: "
              "kernels, bytes against the ideal, and the kernel's static schedule.",
              _mx_cast_tpu),
    Benchmark("mx_linear_train.json", "tools/bench/mx_linear_train.py --train", "MX linears in training",
              "A small transformer trained with every linear an `MXLinear`, against the same training in bf16.",
              _mx_linear_train),
    Benchmark("mx_linear_train_tpu.json", "tools/bench/mx_linear_train.py --tpu", "An MX training step compiled for TPU",
              "One linear's forward and backward and a transformer training step, bf16 and MXFP8, compiled for TPU.",
              _mx_linear_train_tpu),
    Benchmark("mx4_cast_tpu.json", "tools/bench/mx4_cast_tpu.py", "MXFP4 on TPU: kernels and bytes",
              "The MXFP4 cast, dequantization and fused linear compiled for TPU v5e and v6e, 1 MB to 1 GB.",
              _mx4_cast_tpu),
    Benchmark("mx4_cast_tpu_v7.json", "tools/bench/mx4_cast_tpu.py --generations v7", "MXFP4 on TPU v7",
              "The same, for TPU v7 (TPU7x), which only libtpu 0.0.52 of the TorchTPU environment compiles.",
              _mx4_cast_tpu),
    Benchmark("mx4_cast.json", "tools/bench/mx4_cast.py", "MXFP4 cast on CUDA",
              "`to_mxfp4` and `from_mxfp4` on an H100 against a copy, 1 MB to 1 GB.", _mx4_cast),
    Benchmark("mx4_linear.json", "tools/bench/mx4_linear.py", "The fused MXFP4 linear on CUDA",
              "The MXFP4 linear (weight kept MXFP4 in HBM, dequantized in the kernel) against bf16 `linear` at decode "
              "shapes, 1 to 64 tokens.", _mx4_linear),
    Benchmark("mx4_linear_spec_h100.json", "tools/bench/mx4_linear.py", "The same benchmark on checkpoint-layout weights",
              "The benchmark one build before `Packing.DECODE`, on the weights as cast (the spec's layout), the "
              "decoder's thirteen integer operations a word and x's byte permutes or reordering launch included.",
              _mx4_linear),
    Benchmark("mx4_linear_bits_only_h100.json", "tools/bench/mx4_linear.py",
              "The same benchmark with only each word's bits packed",
              "The benchmark one build before `Packing.DECODE` also transposed each span's words: a packed "
              "weight's decoder pairs were x's own, but a quad of threads still read x in four 16-byte pieces "
              "64 bytes apart, or after a launch that reordered it.", _mx4_linear),
    Benchmark("mx4_linear_h200.json", "tools/bench/mx4_linear.py", "The fused MXFP4 linear on an H200",
              "The same benchmark on the H200 the device machine lent: both CUDA kernels launched to overlap the "
              "kernel before them, x ordered by a launch of its own, the candidates from the H200 sweeps.", _mx4_linear),
    Benchmark("mx4_linear_h200_rerun.json", "tools/bench/mx4_linear.py", "The same benchmark again on another H200",
              "The benchmark run again on another H200 the device machine lent, the code the same but for the "
              "warpgroup kernel's cluster candidates (timed, never chosen): how far two runs differ.", _mx4_linear),
    Benchmark("mx4_linear_write_refill_h100.json", "tools/bench/mx4_linear.py", "The same benchmark, the tuning's L2 refill written",
              "The benchmark one build earlier, whose tuning refilled L2 before each timed call by writing twice its size "
              "(the dirty lines' write-back then shared HBM with the weight's reads) where it now reads it; the "
              "candidates the same but for balanced twins of the decode kernel's, never chosen.", _mx4_linear),
    Benchmark("mx4_decode_sweep.json", "tools/bench/mx4_decode_sweep.py --tokens 1,16", "The CUDA decode kernel's sweep",
              "Every configuration of an earlier build of the CUDA MXFP4 decode kernel (addresses recomputed each span) "
              "on the H100, at 1 and 16 tokens.", _mx4_decode_sweep),
    Benchmark("mx4_decode_sweep_h200.json", "tools/bench/mx4_decode_sweep.py", "The CUDA decode kernel's sweep on an H200",
              "The same sweep at every token count the linear benchmark runs, on the H200 the device machine lent: "
              "the candidates the tuning times come from it.", _mx4_decode_sweep),
    Benchmark("mx4_wgmma_sweep_h200.json", "tools/bench/mx4_decode_sweep.py --kernels wgmma",
              "The CUDA warpgroup kernel's sweep on an H200",
              "Every configuration of the warpgroup-MMA decode kernel (x through shared memory by bulk copies) on the "
              "H200; its candidates for 17 to 64 tokens come from it.", _mx4_decode_sweep),
    Benchmark("mx4_decode_sweep_16_64_h200.json", "tools/bench/mx4_decode_sweep.py --kernels decode --tokens 16,32,64",
              "The CUDA decode kernel's sweep from 16 tokens, x ordered by its own launch",
              "Every configuration of the decode kernel at 16 to 64 tokens on the H200, launched dependently, x put in "
              "pair order by `x_order.cu` where a configuration takes it so: the candidates from 9 tokens come from it "
              "and the warpgroup kernel's sweep.", _mx4_decode_sweep),
    Benchmark("mx4_wgmma_variants_h200.json", "tools/bench/mx4_decode_sweep.py --kernels wgmma --tokens 16,32,64",
              "Two variants of the warpgroup kernel that were not kept",
              "Each span's MMAs in two groups (one half of the span decoded while the other's MMAs run) and shorter "
              "rings of x, against the kernel as kept.", _mx4_wgmma_variants),
    Benchmark("mx4_wgmma_pairs_h100.json", "tools/bench/mx4_decode_sweep.py --kernels wgmma --tokens 16,32,64",
              "The warpgroup kernel's two pipelines on the H100",
              "Each span decoded whole and then its MMAs issued, against two K chunks decoded while the MMAs of "
              "the two before run (fewer registers a thread, more CTAs an SM): the 17 to 64 token candidates come "
              "from it.", _mx4_wgmma_pipelines),
    Benchmark("mx4_wgmma_sums_h100.json",
              "tools/bench/mx4_decode_sweep.py --kernels wgmma --sums global,cluster --tokens 16,32,64",
              "Where a split's sums are added: global memory or a cluster",
              "The warpgroup kernel's row tiles split across CTAs, their partial sums added by the last CTA from L2 "
              "or by the first from the cluster's shared memory: the 33 to 64 token candidates come from it.",
              _mx4_wgmma_sums),
    Benchmark("mx4_decode_late_x_h100.json", "tools/bench/mx4_decode_sweep.py --kernels decode --x-early both",
              "x loaded with the weight or as the arithmetic reaches it",
              "The decode kernel's register path at 8 and 16 tokens with x early and late, double buffered or not.",
              _mx4_late_x),
    Benchmark("mx4_read_pattern_h100.json", "tools/bench/mx4_read_pattern.py",
              "The warpgroup kernel's weight reads alone",
              "The weight's copies without decoding or MMAs, as stored and packed per tile, against a copy: whether "
              "the order of the reads holds the kernel back.", _mx4_read_pattern),
    Benchmark("mx4_wgmma_trace_h100.json", "tools/bench/mx4_wgmma_trace.py --tiled",
              "Where the warpgroup kernel's time goes, CTA by CTA",
              "The traced build's timer and cycle counts per CTA: launch ramp, main loop by what it waited for, "
              "split-K epilogue; and a build that read the weight packed per 64-row tile and span (`--tiled`), "
              "slower on every row and since removed.", _mx4_wgmma_trace),
    Benchmark("mx4_wgmma_trace_sums_h100.json", "tools/bench/mx4_wgmma_trace.py --tokens 64",
              "The warpgroup kernel traced with its sums in a cluster",
              "The same trace at 64 tokens with the scale bytes two spans ahead, a split's sums added through "
              "global memory and through a cluster.", _mx4_wgmma_trace),
    Benchmark("mx4_balance_h100.json", "tools/bench/mx4_decode_sweep.py --kernels candidates --tokens 1,8,16",
              "Row tiles shared out evenly across the SMs: not kept",
              "The decode kernel's candidates with one row tile a CTA and as a balanced grid of CTAs taking several "
              "tiles each.", _mx4_balance),
    Benchmark("mx4_packing_candidates_h100.json",
              "tools/bench/mx4_decode_sweep.py --kernels candidates --packing both",
              "The weight repacked for the decoder (`Packing.DECODE`)",
              "The tuning's candidates on a spec-layout weight and on its repacked twin, the decoder's integer "
              "operations and x's permutes the difference.", _mx4_packing),
    Benchmark("mx4_decode_budgets_h100.json",
              "tools/bench/mx4_decode_sweep.py --kernels decode --packing decode --tokens 1,8,16 --x-early both "
              "--budgets 2,3,4,5,6",
              "The decode kernel on a packed weight, its register budget cut",
              "Every configuration on `Packing.DECODE` weights, whose span words are transposed so that x is read "
              "as it lies in memory, with the register budget cut for 2 to 6 CTAs per SM too: the candidates "
              "added for 1 to 16 tokens come from it.", _mx4_decode_sweep),
    Benchmark("mx4_wgmma_packed_h100.json",
              "tools/bench/mx4_decode_sweep.py --kernels wgmma,candidates --packing decode --tokens 32,64 "
              "--sums global,cluster",
              "Both kernels on gpt-oss's packed projections at 32 and 64 tokens",
              "Every warpgroup configuration and the tuning's candidates on `Packing.DECODE` weights of gpt-oss's "
              "two projections, where the 64-token column is short of bf16.", _mx4_decode_sweep),
    *_family_sweeps("slice", "x_spans", "x's slice in shared memory",
                    "CTAs of many rows copying their slice of x (K split across CTAs) into shared memory once for "
                    "all their warps",
                    "The decode kernel with x's slice in shared memory (a build since removed)"),
    *_family_sweeps("split", "k_spans", "CTAs of many rows with K split across them",
                    "CTAs of 32 to 256 rows (warps side by side along N sharing x through L1) taking a split of K, "
                    "so that x is read from L2 once for many rows",
                    "The decode kernel with K split across CTAs of many rows"),
    Benchmark("mx4_wgmma_cluster_h200.json", "tools/bench/mx4_decode_sweep.py --kernels wgmma --tokens 16,32,64",
              "x shared by a cluster of CTAs: not kept",
              "The warpgroup kernel with x multicast to a thread block cluster of 2 or 4 row tiles, so that each span "
              "is read from L2 once per cluster, against the kernel as kept.", _mx4_wgmma_cluster),
    Benchmark("mx4_launch_sweep_h200.json", "tools/bench/mx4_decode_sweep.py --kernels candidates --launch both",
              "The CUDA kernels launched plainly and dependently",
              "What overlapping each launch with the kernel before it saves, on the tuning's candidates.",
              _mx4_launch_sweep),
    Benchmark("mx4_prefetch_sweep_h200.json", "tools/bench/mx4_decode_sweep.py --kernels candidates --prefetch n",
              "How much weight to bring into L2 before the kernel before ends",
              "The tuning's candidates with 0, 1, 2 and 4 spans of each row prefetched: `PREFETCH_SPANS` is taken "
              "from it.", _mx4_prefetch_sweep),
    Benchmark("mx4_decode_probe.json", "tools/bench/mx4_decode_probe.py", "Where the CUDA decode kernel's time goes",
              "Loads and arithmetic of the decode kernel timed apart.", _mx4_decode_probe),
    Benchmark("mx4_sweep.json", "tools/bench/mx4_sweep.py", "The MXFP4 kernels' configuration sweep",
              "Every configuration of the cast and the fused linear timed on the H100, to pick the defaults.", _mx4_sweep),
    Benchmark("gpt_oss_tpu.json", "tools/bench/gpt_oss_tpu.py", "gpt-oss-20b on one TPU",
              "gpt-oss-20b's whole decode step with MXFP4 experts and with bf16 experts, compiled for one chip.",
              _gpt_oss_tpu),
)

_HEADER = """# Benchmarks

<!-- Generated by `python tools/bench/summarize.py` from tools/bench/results/; do not edit:
tests/docs/test_benchmarks_page.py fails when this page and the results files differ. -->

Each benchmark is a script under `tools/bench/` that writes one results file to
`tools/bench/results/`, its latest run, named after the benchmark; this page is generated from
those files. Every ratio is against a baseline measured in the same run (a copy, `openxla`, torchao,
an A/A control), never against another run. Timings on the CPU come from a 2-core shared machine
and move from run to run; each section says what it ran on. TPU figures are compiled here by
libtpu's compile-only client and labelled "compiled for TPU … by libtpu …, not run": nothing in
them ran on a TPU.

| benchmark | script | results file |
| --- | --- | --- |
"""


def render() -> str:
    lines = [_HEADER.rstrip("\n")]
    for b in BENCHMARKS:
        anchor = re.sub(r"[^\w\- ]", "", b.title.lower()).replace(" ", "-")  # MyST's heading anchors
        lines.append(f"| [{b.title}](#{anchor}) | `{b.script}` | `{b.results}` |")
    lines.append("")
    for b in BENCHMARKS:
        path = RESULTS / b.results
        data = path.read_text(encoding="utf-8") if path.suffix == ".txt" else _load(b.results)
        lines += [f"## {b.title}", "", f"`{b.script}` → `tools/bench/results/{b.results}`. {b.measures}", ""]
        lines += b.render(data)
    return "\n".join(lines).rstrip("\n") + "\n"


_BLOCK = re.compile(r"(<!-- generated by tools/bench/summarize\.py from (\S+); do not edit -->\n)(.*?)(<!-- end -->)", re.S)


def _mx4_linear_grid(data: dict) -> list[str]:
    """Speed-up over bf16 (weight read as a share of the copy) per shape and token count, for the guide."""
    tokens = sorted({r["tokens"] for r in data["rows"]})
    grid: dict[str, dict[int, str]] = {}
    for r in data["rows"]:
        mark = {"Triton fused kernel": " T", "fused kernel": " T", "dequantize + matmul": " D",
                "CUDA warpgroup kernel": " W"}.get(r.get("path"), "")
        grid.setdefault(r["shape"], {})[r["tokens"]] = f"{r['speedup']:.2f} ({r['weight_read_share']:.2f}){mark}"
    return [
        f"{data['device']}, torch {data['torch']}, Triton {data['triton']}; a 1 GiB device copy ran at "
        f"{data['copy_GBps']:.0f} GB/s in the same run. " + _packing_said(data) + "Speed-up over bf16, and in "
        "brackets the MXFP4 weight's bytes "
        "over the time as a share of the copy's rate; T: the first call's timing chose the Triton kernel, D: "
        "dequantize then `linear`, W: the CUDA warpgroup kernel, unmarked: the CUDA decode kernel.",
        "",
        *_table(["shape", *map(str, tokens)], [[shape, *(cells.get(t, "-") for t in tokens)] for shape, cells in grid.items()]),
    ]


GUIDE_BLOCKS = {"mx4_linear.json": _mx4_linear_grid, "mx4_linear_h200.json": _mx4_linear_grid}
"""The tables of docs/guides/mxfp4.md generated from a results file, between the markers ``_BLOCK`` finds."""


def render_guide() -> str:
    """docs/guides/mxfp4.md with each generated block made again from its results file."""
    def block(match: re.Match) -> str:
        return match.group(1) + "\n".join(GUIDE_BLOCKS[match.group(2)](_load(match.group(2)))).rstrip("\n") + "\n" + match.group(4)

    return _BLOCK.sub(block, GUIDE.read_text(encoding="utf-8"))


def unlisted() -> list[str]:
    """Results files with no section on the page."""
    return sorted({p.name for p in RESULTS.iterdir()} - {b.results for b in BENCHMARKS})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md or the guide's tables are stale")
    args = parser.parse_args(argv)
    if unlisted():
        print(f"results files without a section in {__file__}: {unlisted()}", file=sys.stderr)
        return 1
    text, guide = render(), render_guide()
    if args.check:
        if PAGE.read_text(encoding="utf-8") != text or GUIDE.read_text(encoding="utf-8") != guide:
            print("docs/benchmarks.md or docs/guides/mxfp4.md is stale: python tools/bench/summarize.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    GUIDE.write_text(guide, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} and {GUIDE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
