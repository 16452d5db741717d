"""Capture the real H200 traces the shared fixtures lack: sync-bound, copy-bound, allocation
churn, and a profile with no ProfilerStep markers.

Run on the device machine: python3 validation/capture_fixtures.py OUT_DIR
Each case writes OUT_DIR/<case>/trace.json.gz and meta.json in the layout of
../shared/fixtures/h200 (same profiler settings: CPU+CUDA, record_shapes, wait=1 warmup=2
active=5), plus the unprofiled step time measured first.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import threading
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule

DEV = "cuda"


def nvml_sampler(samples: list, stop: threading.Event) -> None:
    """Mean GPU utilization while the unprofiled steps run (NVML, every 50 ms)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        while not stop.is_set():
            samples.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            time.sleep(0.05)
    except Exception as e:  # noqa: BLE001
        samples.append(f"nvml failed: {e}")


def timed_steps(step, n: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n


def flops_of(step) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        step()
    return int(fc.get_total_flops())


def capture(name: str, step, config: dict, note: str, out: str, steps_marked: bool = True) -> None:
    for _ in range(5):  # warm-up: allocator, cuBLAS handles, autotuning
        step()
    samples: list = []
    stop = threading.Event()
    th = threading.Thread(target=nvml_sampler, args=(samples, stop), daemon=True)
    th.start()
    unprof = timed_steps(step, 20)
    stop.set()
    th.join()
    flops = flops_of(step)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    raw = os.path.join(d, "trace.json")
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    if steps_marked:
        with profile(activities=acts, record_shapes=True, schedule=schedule(wait=1, warmup=2, active=5),
                     on_trace_ready=lambda p: p.export_chrome_trace(raw)) as prof:
            for _ in range(8):
                step()
                prof.step()
    else:
        with profile(activities=acts, record_shapes=True) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    size = os.path.getsize(raw)
    os.remove(raw)
    util = [s for s in samples if isinstance(s, (int, float))]
    meta = {
        "config": config, "note": note, "name": name, "step_s_unprofiled": unprof,
        "nvml_gpu_util_mean": sum(util) / len(util) if util else None, "trace_bytes": size,
        "flops_per_step": flops, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cuda": torch.version.cuda, "active_steps": 5 if steps_marked else 0,
        "profiler": "CPU+CUDA, record_shapes=True, " + ("schedule wait=1 warmup=2 active=5" if steps_marked
                                                         else "no schedule, no prof.step(): 3 iterations"),
        "step_s_unprofiled_how": "wall time of 20 consecutive steps without the profiler, one synchronize at "
                                 "the end, divided by 20",
    }
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: unprofiled step {unprof * 1000:.2f} ms, nvml util {meta['nvml_gpu_util_mean']}, "
          f"trace {size / 1e6:.1f} MB", flush=True)


def mlp(d: int, layers: int) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(layers)]).to(DEV)


def item_checks(out: str) -> None:
    """A bf16 MLP whose loop reads GPU values on the host: per-layer activation checks and
    per-parameter gradient norms with .item(), as debugging code often does."""
    torch.manual_seed(0)
    d, layers, batch = 4096, 8, 1024
    model = mlp(d, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(batch, d, device=DEV)
    log: list = []

    def step():
        h = x
        with torch.autocast("cuda", dtype=torch.bfloat16):
            for block in model:
                h = block(h)
                if not torch.isfinite(h).all().item():  # a NaN check after every block
                    raise RuntimeError("nan")
                log.append(h.float().abs().mean().item())
            loss = h.float().pow(2).mean()
        loss.backward()
        norms = [p.grad.norm().item() for p in model.parameters()]  # per-parameter grad norm logging
        log.append(max(norms))
        opt.step()
        opt.zero_grad(set_to_none=True)
        log.append(loss.item())
        del log[:-100]

    capture("item_checks", step, {"d": d, "layers": layers, "batch": batch, "dtype": "bf16 autocast",
                                 "syncs_per_step": 2 * layers + 2 * layers + 1},
            "bf16 MLP with .item() after every block and per-parameter grad-norm .item(): host-GPU syncs",
            out)


def sync_bound(out: str) -> None:
    """A classifier whose loop pulls predictions to the host every step and computes metrics in
    numpy: the GPU idles while the host waits for them and then crunches them."""
    import numpy as np

    torch.manual_seed(0)
    d, layers, batch, classes = 4096, 6, 2048, 1000
    model = nn.Sequential(mlp(d, layers), nn.Linear(d, classes).to(DEV))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(batch, d, device=DEV)
    labels = torch.randint(0, classes, (batch,), device=DEV)
    labels_np = labels.cpu().numpy()
    history: list = []

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        probs = logits.float().softmax(-1).detach().cpu().numpy()  # host copy: waits for the whole step
        preds = probs.argmax(-1)
        top5 = np.argsort(-probs, axis=1)[:, :5]
        history.append({"loss": loss.item(), "acc": float((preds == labels_np).mean()),
                        "top5": float((top5 == labels_np[:, None]).any(1).mean()),
                        "confusion": np.bincount(labels_np * classes + preds, minlength=classes * classes).sum()})
        del history[:-100]

    capture("sync_bound", step, {"d": d, "layers": layers, "batch": batch, "classes": classes,
                                 "dtype": "bf16 autocast"},
            "bf16 classifier that copies its softmax to the host every step and computes accuracy, top-5 and "
            "a confusion count in numpy", out)


def copy_bound(out: str) -> None:
    """Each step copies a large batch from pageable host memory and returns predictions to the
    host: copies dominate a small model."""
    torch.manual_seed(0)
    batch, d = 32768, 2048
    host_x = torch.randn(batch, d)  # pageable: no pin_memory
    model = nn.Sequential(nn.Linear(d, 512), nn.ReLU(), nn.Linear(512, d)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        x = host_x.to(DEV)  # 268 MB from pageable memory
        y = model(x)
        loss = (y - x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        preds = y.detach().to("cpu")  # 268 MB back to pageable memory
        return preds

    capture("copy_bound", step, {"batch": batch, "d": d, "bytes_in": batch * d * 4, "bytes_out": batch * d * 4,
                                 "pin_memory": False},
            "small MLP fed a 268 MB pageable batch per step and returning 268 MB of predictions", out)


def alloc_churn(out: str) -> None:
    """Variable sequence lengths with torch.cuda.empty_cache() after every step: the caching
    allocator hands memory back and cudaMalloc/cudaFree run in every step."""
    torch.manual_seed(0)
    d = 1024
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True), 4).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = [256, 1024, 512, 2048, 384, 1536, 768, 1280]
    i = [0]

    def step():
        n = lengths[i[0] % len(lengths)]
        i[0] += 1
        x = torch.randn(16, n, d, device=DEV)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()

    capture("alloc_churn", step, {"d": d, "layers": 4, "batch": 16, "seq_lengths": lengths,
                                  "empty_cache_every_step": True},
            "transformer with varying sequence length and torch.cuda.empty_cache() every step", out)


def no_steps(out: str) -> None:
    """A profile recorded without a schedule or prof.step(): no ProfilerStep# markers."""
    torch.manual_seed(0)
    model = mlp(2048, 6)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(4096, 2048, device=DEV)

    def step():
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    capture("no_step_markers", step, {"d": 2048, "layers": 6, "batch": 4096, "dtype": "float32"},
            "fp32 MLP profiled for 3 iterations without a schedule or prof.step(): no ProfilerStep#", out,
            steps_marked=False)


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = {f.__name__: f for f in (item_checks, sync_bound, copy_bound, alloc_churn, no_steps)}
    for case in [cases[n] for n in sys.argv[2:]] or cases.values():
        try:
            case(out)
        except Exception as e:  # noqa: BLE001 - one failing case must not lose the others
            print(f"{case.__name__} FAILED: {type(e).__name__}: {e}", flush=True)
        torch.cuda.empty_cache()
