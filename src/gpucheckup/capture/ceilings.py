"""`gpucheckup ceilings`: measure what this GPU really reaches, in seconds.

- matmul rate per dtype (bf16, fp16, tf32, fp32; fp8 through torch._scaled_mm when it works):
  an n x n by n x n product (n = 8192, 4096 with --quick) on random data counts 2*n^3 FLOPs; tf32
  and fp32 are fp32 tensors with torch.set_float32_matmul_precision("high") and ("highest").
  The ceiling is the burst rate: 3 warm-up products, then the median of 10 single products each
  timed between CUDA events (the method behind the H200 reference figures). Under seconds of
  full load the GPU reaches its power limit and clocks drop: the bf16 rate after SUSTAIN_S of
  back-to-back products is stored too (`matmul_sustained_tflops`), as what long jobs can expect.
- device-to-device copy: dst.copy_(src) of 1 GiB (256 MiB quick), counting bytes read + written
  (2x the size), as a memory-bandwidth ceiling comparable with the datasheet's figure.
- host-to-device copy of 256 MiB (64 MiB quick) from pinned memory (non_blocking) and from
  ordinary pageable memory.
Each figure: warm up for WARMUP_S (clocks and power settle), then REPEATS timed samples between
CUDA events, each sample long enough (>= SAMPLE_MS) to drown the event overhead; the median
sample gives the figure. Results are stored by hardware/ceilings.py.
"""

from __future__ import annotations

import math
import statistics
import time
from datetime import datetime, timezone
from typing import Callable

from gpucheckup.errors import CheckupError
from gpucheckup.hardware.ceilings import Ceilings
from gpucheckup.hardware.peaks import match_gpu

WARMUP_S = 1.0
REPEATS = 15
BURST_WARMUPS, BURST_REPEATS = 3, 10
SUSTAIN_S = 3.0
SAMPLE_MS = 20.0


def _torch():
    """torch with a CUDA device, or a one-line CheckupError saying what is missing."""
    try:
        import torch
    except ImportError:
        raise CheckupError("gpucheckup ceilings needs PyTorch with CUDA, and torch is not installed "
                           "(pip install torch)") from None
    if not torch.cuda.is_available():
        raise CheckupError(f"gpucheckup ceilings needs a CUDA GPU: torch {torch.__version__} sees none "
                           f"(torch.cuda.is_available() is False; built for CUDA {torch.version.cuda})")
    return torch


def time_ms(torch, fn: Callable[[], None], warmup_s: float = WARMUP_S, repeats: int = REPEATS) -> float:
    """Median milliseconds of one call of fn, timed with CUDA events after a warm-up."""
    torch.cuda.synchronize()
    t0, calls = time.perf_counter(), 0
    while calls < 3 or time.perf_counter() - t0 < warmup_s:
        fn()
        calls += 1
        if calls % 4 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    single_ms = max((time.perf_counter() - t0) * 1000 / calls, 1e-3)
    inner = max(1, math.ceil(SAMPLE_MS / single_ms))
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / inner)
    return statistics.median(samples)


def burst_ms(torch, fn: Callable[[], None], warmups: int = BURST_WARMUPS, repeats: int = BURST_REPEATS,
             load_s: float = 0.0) -> float:
    """Median milliseconds of single calls timed with CUDA events, after a few warm-up calls (and,
    with load_s, after that many seconds of back-to-back calls)."""
    for _ in range(warmups):
        fn()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < load_s:
        fn()
        torch.cuda.synchronize()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def matmul_tflops(torch, dtype: str, n: int, dev, load_s: float = 0.0) -> float:
    """Measured TFLOP/s of an n^3 matmul in one dtype."""
    if dtype == "fp8":
        return _fp8_tflops(torch, n, dev)
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[dtype]
    a = torch.randn(n, n, device=dev, dtype=tdt)
    b = torch.randn(n, n, device=dev, dtype=tdt)
    c = torch.empty(n, n, device=dev, dtype=tdt)
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    try:
        ms = burst_ms(torch, lambda: torch.matmul(a, b, out=c), load_s=load_s)
    finally:
        torch.set_float32_matmul_precision(old)
    del a, b, c
    return 2.0 * n**3 / (ms / 1000) / 1e12


def _fp8_tflops(torch, n: int, dev) -> float:
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # _scaled_mm wants mat2 column-major
    one = torch.tensor(1.0, device=dev)

    def run():
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    run()  # raises here when this GPU or build has no FP8 GEMM
    ms = burst_ms(torch, run)
    return 2.0 * n**3 / (ms / 1000) / 1e12


def copy_gb_s(torch, kind: str, nbytes: int, dev, warmup_s: float) -> float:
    """Measured GB/s of a device-to-device (read + write counted) or host-to-device copy."""
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    if kind == "d2d":
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev).fill_(1)
        ms = time_ms(torch, lambda: dst.copy_(src), warmup_s)
        moved = 2 * nbytes
    else:
        src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=(kind == "h2d_pinned")).fill_(1)
        ms = time_ms(torch, lambda: dst.copy_(src, non_blocking=True), warmup_s, repeats=max(REPEATS // 2, 5))
        moved = nbytes
    del dst, src
    return moved / (ms / 1000) / 1e9


def measure(device: int = 0, quick: bool = False, progress: Callable[[str], None] | None = None) -> Ceilings:
    """Measure this GPU's ceilings; CheckupError (one line) without torch or CUDA."""
    torch = _torch()
    say = progress or (lambda _m: None)
    if device < 0 or device >= torch.cuda.device_count():
        raise CheckupError(f"no CUDA device {device} (this machine has {torch.cuda.device_count()})")
    dev = torch.device("cuda", device)
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    name = torch.cuda.get_device_name(dev)
    n = 4096 if quick else 8192
    warm = 0.3 if quick else WARMUP_S
    out = Ceilings(device=name, measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   torch=torch.__version__, cuda=str(torch.version.cuda), sm_count=props.multi_processor_count,
                   matmul_n=n)
    for dtype in ("bf16", "fp16", "tf32", "fp32", "fp8"):
        say(f"matmul {dtype} {n}x{n}x{n} ...")
        try:
            out.matmul_tflops[dtype] = matmul_tflops(torch, dtype, n, dev)
        except (RuntimeError, TypeError, AttributeError, NotImplementedError) as e:
            out.skipped[dtype] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        torch.cuda.empty_cache()
    if "bf16" in out.matmul_tflops:
        say(f"matmul bf16 after {SUSTAIN_S:g} s of full load ...")
        load_s = 0.5 if quick else SUSTAIN_S
        out.matmul_sustained_tflops["bf16"] = matmul_tflops(torch, "bf16", n, dev, load_s=load_s)
        torch.cuda.empty_cache()
    big, small = (256 << 20, 64 << 20) if quick else (1 << 30, 256 << 20)
    for kind, size in (("d2d", big), ("h2d_pinned", small), ("h2d_pageable", small)):
        say(f"copy {kind} {size >> 20} MiB ...")
        try:
            out.copy_gb_s[kind] = copy_gb_s(torch, kind, size, dev, warm)
        except RuntimeError as e:
            out.skipped[kind] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        torch.cuda.empty_cache()
    return out


def print_ceilings(c: Ceilings, console) -> None:
    """A table of the measured ceilings beside the datasheet's figures."""
    from rich.table import Table

    g = match_gpu(c.device)
    t = Table(title=f"Ceilings of {c.device}" + (f" (datasheet: {g.id})" if g else " (not in the peak table)"),
              title_justify="left")
    for col in ("what", "measured", "datasheet", "% of datasheet"):
        t.add_column(col, justify="left" if col == "what" else "right")
    for dt, v in c.matmul_tflops.items():
        ds = g.peak(dt) if g else None
        t.add_row(f"matmul {dt} (TFLOP/s)", f"{v:.1f}", f"{ds:g}" if ds else "-", f"{100 * v / ds:.0f}%" if ds else "-")
    for dt, v in c.matmul_sustained_tflops.items():
        ds = g.peak(dt) if g else None
        t.add_row(f"matmul {dt} sustained (TFLOP/s)", f"{v:.1f}", f"{ds:g}" if ds else "-",
                  f"{100 * v / ds:.0f}%" if ds else "-")
    for kind, v in c.copy_gb_s.items():
        ds = g.mem_bw_gb_s if g and kind == "d2d" else None
        t.add_row(f"copy {kind} (GB/s)", f"{v:.1f}", f"{ds:g}" if ds else "-", f"{100 * v / ds:.0f}%" if ds else "-")
    for what, why in c.skipped.items():
        t.add_row(f"{what}: not measured", why[:60], "", "")
    console.print(t)
