"""Model FLOPs utilisation: useful FLOPs per second against what the GPU can do.

Definitions (also in docs/mfu.md):
- FLOPs per step F, from the first available of: the user (`--flops-per-step F`, or
  `--params N --tokens-per-step T`: 6*N*T, plus PaLM appendix B's attention term 12*L*D*S*T with
  `--layers L --d-model D --seq-len S`, D = heads x head dim), the count the capture agent
  stored (`flops.json` in a run directory), the trace's FLOP annotations (`with_flops=True`),
  the GEMM/conv/attention shapes of a `record_shapes` trace (shape_flops.py). An explicit option
  wins because the user asked for it; `mfu.estimates` keeps every source found, to compare.
- step time: the window's step time (analysis/one_trace/window.py: the median step window, or the step
  without the profiler when that correction applies), seconds.
- achieved TFLOP/s = F / step time / 1e12.
- peak: the datasheet dense peak (hardware/peaks.py) of the GPU named in the trace's
  `deviceProperties` (or `--gpu`), for the dtype most GEMM kernel time runs in (gemm_dtype.py)
  when that is bf16, fp16 or fp8; when the GEMMs run in fp32 or tf32 (or there are none), the
  bf16 tensor-core peak (fp16 on GPUs without bf16): the hardware the job leaves unused is part
  of the gap. `--dtype` picks another; `--peak-tflops` replaces the figure.
- MFU % = 100 x achieved / peak. Also reported: against the bf16 peak, against the peak of the
  GEMMs' own dtype when it differs (an fp32 job's share of the FP32 FMA peak), and against the
  measured ceiling of the chosen dtype when `gpucheckup ceilings` has been run for this GPU (or
  `--ceilings FILE`).
- healthy bands (the seed articles): dense pre-training 35-50%, MoE with FP8 20-32%.
"""

from __future__ import annotations

import msgspec

from gpucheckup.analysis.flops.shape_flops import FlopCount
from gpucheckup.document import Mfu  # the report's `mfu` block: the analysis builds the document's type itself
from gpucheckup.hardware import ceilings as ceil
from gpucheckup.hardware.peaks import GpuPeak, lookup

TENSOR_DTYPES = ("bf16", "fp16", "fp8")  # MFU is measured against the peak of these when the GEMMs use them
HEALTHY_BANDS_PCT = {"dense_pretraining": (35.0, 50.0), "moe_fp8": (20.0, 32.0)}


class MfuInputs(msgspec.Struct):
    """What the user or the capture agent told us; everything optional."""

    flops_per_step: float | None = None
    params: float | None = None
    tokens_per_step: float | None = None
    layers: int | None = None
    seq_len: int | None = None
    d_model: int | None = None
    samples_per_step: float | None = None
    gpu: str | None = None
    dtype: str | None = None
    peak_tflops: float | None = None
    ceilings: ceil.Ceilings | None = None
    ceilings_path: str | None = None
    agent_flops: dict | None = None  # {"flops_per_step": F, "how": "...", "path": "..."}
    framework: str = ""  # the training loop's framework, as the agent saw it (capture/agent/framework.py)
    unprofiled_step_ms: float | None = None  # step time without the profiler (profiler_overhead.py)
    unprofiled_from: str = ""  # where that figure came from


def formula_flops(inp: MfuInputs) -> tuple[float, str] | None:
    """FLOPs per step from the parameter count and tokens (PaLM appendix B), with the formula used."""
    if not (inp.params and inp.tokens_per_step):
        return None
    n, t = inp.params, inp.tokens_per_step
    if inp.layers and inp.seq_len and inp.d_model:
        attn = 12.0 * inp.layers * inp.d_model * inp.seq_len
        return (6.0 * n + attn) * t, (f"(6*N + 12*L*D*S) * T with N={n:g}, L={inp.layers}, D={inp.d_model}, "
                                      f"S={inp.seq_len}, T={t:g} (PaLM appendix B)")
    return 6.0 * n * t, (f"6*N*T with N={n:g}, T={t:g} (PaLM appendix B without the attention term: "
                         "pass --layers, --d-model and --seq-len to add it)")


def pick_flops(inp: MfuInputs, annotated: FlopCount | None,
               shapes: FlopCount | None) -> tuple[float | None, str | None, str, dict]:
    """FLOPs per step, its source, how it was obtained, and every estimate available."""
    estimates: dict[str, float] = {}
    chosen: tuple[float, str, str] | None = None
    if inp.flops_per_step:
        estimates["user"] = inp.flops_per_step
        chosen = chosen or (inp.flops_per_step, "user", "--flops-per-step")
    f = formula_flops(inp)
    if f:
        estimates["formula"] = f[0]
        chosen = chosen or (f[0], "formula", f[1])
    if inp.agent_flops and inp.agent_flops.get("flops_per_step"):
        estimates["agent"] = float(inp.agent_flops["flops_per_step"])
        chosen = chosen or (estimates["agent"], "agent",
                            f"{inp.agent_flops.get('path', 'flops.json')}: {inp.agent_flops.get('how', '')}".strip())
    if annotated:
        estimates["annotations"] = annotated.flops_per_step
        chosen = chosen or (annotated.flops_per_step, "annotations",
                            f"profiler with_flops annotations on {annotated.ops_counted} ops (median per step)")
    if shapes:
        estimates["shapes"] = shapes.flops_per_step
        chosen = chosen or (shapes.flops_per_step, "shapes",
                            f"GEMM/conv/attention FLOPs from the shapes of {shapes.ops_counted} ops (median per step)")
    if chosen is None:
        return None, None, "", estimates
    return chosen[0], chosen[1], chosen[2], estimates


def assess(pct: float | None) -> str | None:
    """Where an MFU falls against the healthy bands."""
    if pct is None:
        return None
    lo_moe, hi_moe = HEALTHY_BANDS_PCT["moe_fp8"]
    lo_dense, hi_dense = HEALTHY_BANDS_PCT["dense_pretraining"]
    if pct < lo_moe:
        return "below both healthy bands"
    if pct < lo_dense:
        return f"within the MoE/FP8 band ({lo_moe:g}-{hi_moe:g}%), below the dense band ({lo_dense:g}-{hi_dense:g}%)"
    if pct <= hi_dense:
        return f"within the dense pre-training band ({lo_dense:g}-{hi_dense:g}%)"
    return f"above the dense pre-training band (> {hi_dense:g}%)"


def mfu_figures(device_name: str, step_s: float, gemm: dict, inp: MfuInputs,
                annotated: FlopCount | None, shapes: FlopCount | None) -> Mfu:
    """The report's `mfu` block: FLOPs, achieved TFLOP/s, peaks, MFU, bands; nulls with a reason."""
    flops, source, how, estimates = pick_flops(inp, annotated, shapes)
    gpu_name = inp.gpu or device_name
    g: GpuPeak | None = lookup(gpu_name) if gpu_name else None
    dominant = gemm.get("dominant")
    dtype, dtype_from = _peak_dtype(inp, g, gemm)
    peak = inp.peak_tflops or (g.peak(dtype) if g else None)
    peak_from = "--peak-tflops" if inp.peak_tflops else (f"{g.id} datasheet, dense {dtype}" if g and peak else None)
    out = Mfu(
        flops_per_step=flops, source=source, source_detail=how or None, estimates=estimates, step_s=step_s,
        achieved_tflops=None, device=gpu_name or None, gpu=g.to_dict() if g else None, dtype=dtype,
        dtype_from=dtype_from, gemm_dtypes_pct=gemm.get("shares_pct", {}), peak_tflops=peak, peak_from=peak_from,
        pct=None, pct_of_bf16_peak=None, gemm_dtype=dominant, pct_of_gemm_dtype_peak=None, measured_tflops=None,
        pct_of_measured=None, ceilings_path=inp.ceilings_path,
        tokens_per_s=inp.tokens_per_step / step_s if inp.tokens_per_step and step_s > 0 else None,
        samples_per_s=inp.samples_per_step / step_s if inp.samples_per_step and step_s > 0 else None,
        healthy_bands_pct={k: list(v) for k, v in HEALTHY_BANDS_PCT.items()}, assessment=None, reason=None,
        shape_flops=None, annotated_flops=None,
    )
    if flops is None:
        out.reason = ("FLOPs per step unknown: the trace has no FLOP annotations (with_flops=True) and no "
                      "GEMM shapes (record_shapes=True); pass --flops-per-step F, or --params N "
                      "--tokens-per-step T")
    elif step_s <= 0:
        out.reason = "step time is zero"
    else:
        _achieved(out, flops / step_s / 1e12, g, gpu_name, inp)
    return out


def _peak_dtype(inp: MfuInputs, g: GpuPeak | None, gemm: dict) -> tuple[str, str]:
    """The dtype whose peak MFU divides by, and why: --dtype, else the GEMMs' dominant tensor-core dtype, else the
    GPU's bf16 (fp16 where it has no bf16) peak."""
    dominant = gemm.get("dominant")
    if inp.dtype:
        return inp.dtype, "--dtype"
    if dominant in TENSOR_DTYPES:
        return dominant, f"GEMM kernels ({gemm['shares_pct'][dominant]:.0f}% of GEMM time in {dominant})"
    dtype = "fp16" if g and not g.peak("bf16") and g.peak("fp16") else "bf16"
    return dtype, (f"the {dtype} tensor-core peak: the GEMMs run in {dominant}, leaving it unused" if dominant
                   else f"default {dtype} (no GEMM kernels in the trace)")


def _achieved(out: Mfu, achieved: float, g: GpuPeak | None, gpu_name: str, inp: MfuInputs) -> None:
    """The achieved TFLOP/s and its shares of each peak into `out` (a reason where no peak is known)."""
    out.achieved_tflops = achieved
    if out.peak_tflops:
        out.pct = 100 * achieved / out.peak_tflops
        out.assessment = assess(out.pct)
    elif g is None:
        out.reason = (f"GPU {gpu_name!r} is not in the peak table: pass --gpu with a table id (e.g. H100-SXM) "
                      "or --peak-tflops" if gpu_name else
                      "the trace names no GPU (no deviceProperties): pass --gpu or --peak-tflops")
    else:
        out.reason = f"{g.id} has no {out.dtype} tensor-core peak in its datasheet: pass --dtype or --peak-tflops"
    if g and g.peak("bf16"):
        out.pct_of_bf16_peak = 100 * achieved / g.peak("bf16")
    if g and out.gemm_dtype and out.gemm_dtype != out.dtype and g.peak(out.gemm_dtype):
        out.pct_of_gemm_dtype_peak = 100 * achieved / g.peak(out.gemm_dtype)
    c = inp.ceilings
    if c and c.matmul_tflops.get(out.dtype):
        out.measured_tflops = c.matmul_tflops[out.dtype]
        out.pct_of_measured = 100 * achieved / c.matmul_tflops[out.dtype]
