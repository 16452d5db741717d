"""`gpucheckup commbench`: bus bandwidth of the collectives through torch.distributed.

All-reduce, all-gather, reduce-scatter and all-to-all of float32 buffers from 1 MiB to 1 GiB
(NCCL, one process per GPU; gloo on CPUs, up to 64 MiB), timed as nccl-tests times them: after
warm-up, the mean of `iters` back-to-back calls, the slowest rank's time; algbw and busbw as
hardware/links.py defines them. Rank 0 writes the JSON (format gpucheckup-commbench/1) to the
cache (hardware/links.cache_path) or --out; `analyze` reads it from a run directory's
commbench.json or that cache to judge a trace's collectives against what the link gives.
The CLI starts the ranks with `python -m torch.distributed.run`; this module is their worker.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gpucheckup.hardware import links

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
MIB = 1 << 20
GPU_SIZES = [MIB << (2 * i) for i in range(6)]  # 1, 4, 16, 64, 256, 1024 MiB
CPU_SIZES = GPU_SIZES[:4]  # gloo moves a 1 GiB buffer in seconds per call
WARMUP, GPU_ITERS, CPU_ITERS = 3, 20, 4


def launch(nproc: int, out: Path | None, max_mib: float | None, extra_env: dict | None = None) -> int:
    """Start `nproc` ranks of the worker with torchrun; the return code of torchrun."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "gpucheckup.capture.commbench"]
    if out:
        cmd += ["--out", str(out)]
    if max_mib:
        cmd += ["--max-mib", str(max_mib)]
    env = {**os.environ, "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE", "0"),
           "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1", **(extra_env or {})}
    return subprocess.call(cmd, env=env)


def _buffers(torch, op: str, nbytes: int, n: int, device):
    """Input and output buffers of one collective whose nccl-tests size S is nbytes."""
    elems = max(nbytes // 4 // n * n, n)
    if op == "all_reduce":
        x = torch.ones(elems, device=device)
        return x, x
    if op == "all_gather":
        return torch.ones(elems // n, device=device), torch.empty(elems, device=device)
    if op == "reduce_scatter":
        return torch.ones(elems, device=device), torch.empty(elems // n, device=device)
    return torch.ones(elems, device=device), torch.empty(elems, device=device)


def _call(dist, op: str, x, y):
    if op == "all_reduce":
        dist.all_reduce(x)
    elif op == "all_gather":
        dist.all_gather_into_tensor(y, x)
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(y, x)
    else:
        dist.all_to_all_single(y, x)


def worker(argv: list[str] | None = None) -> int:
    """One rank: time every collective and size; rank 0 writes the result."""
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # reduce_scatter_tensor's rename in torch 2.13
    p = argparse.ArgumentParser(prog="gpucheckup commbench worker")
    p.add_argument("--out", type=Path)
    p.add_argument("--max-mib", type=float)
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    rank, n = dist.get_rank(), dist.get_world_size()
    sizes = [s for s in (GPU_SIZES if cuda else CPU_SIZES) if not args.max_mib or s <= args.max_mib * MIB]
    iters = GPU_ITERS if cuda else CPU_ITERS
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    results, skipped = [], {}
    progress = None
    if rank == 0:
        from rich.progress import Progress

        progress = Progress(transient=False)
        progress.start()
        task = progress.add_task("commbench", total=len(OPS) * len(sizes))
    for op in OPS:
        for size in sizes:
            if progress:
                progress.update(task, description=f"{op} {size / MIB:.0f} MiB")
            try:
                results.append(_time_collective(torch, dist, op, size, n, device, iters, sync))
            except (RuntimeError, ValueError) as e:  # a backend without this collective (gloo)
                skipped[op] = str(e).splitlines()[0][:200]
            if progress:
                progress.advance(task)
    if progress:
        progress.stop()
    if rank == 0:
        name = torch.cuda.get_device_name(device) if cuda else "cpu"
        _write_results(args.out or links.cache_path(name, n), name, dist.get_backend(), n, torch.__version__, iters,
                       results, skipped)
    dist.destroy_process_group()
    return 0


def _time_collective(torch, dist, op: str, size: int, n: int, device, iters: int, sync) -> dict:
    """One collective at one size: WARMUP calls, then `iters` timed; the slowest rank's time per call and the
    algorithm and bus bandwidths it gives."""
    x, y = _buffers(torch, op, size, n, device)
    for _ in range(WARMUP):
        _call(dist, op, x, y)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        _call(dist, op, x, y)
    sync()
    elapsed = torch.tensor([(time.perf_counter() - t0) / iters * 1e3], device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    ms = float(elapsed.item())
    nbytes = max(x.numel(), y.numel()) * 4
    return {"op": op, "bytes": nbytes, "ms": ms, "algbw_gb_s": nbytes / ms / 1e6,
            "busbw_gb_s": links.busbw_gb_s(op, nbytes, ms, n)}


def _write_results(out: Path, name: str, backend: str, n: int, torch_version: str, iters: int, results: list[dict],
                   skipped: dict[str, str]) -> None:
    """Rank 0: the measurements written atomically (links.COMMBENCH_FORMAT) and printed as a table."""
    from gpucheckup.atomic import write_atomic

    doc = {"format": links.COMMBENCH_FORMAT, "device": name, "backend": backend, "nranks": n,
           "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch_version, "iters": iters, "results": results, "skipped": skipped,
           "env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
    write_atomic(out, (json.dumps(doc, indent=2) + "\n").encode(), parents=True)
    print(f"{'op':<15} {'MiB':>6} {'ms':>9} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for r in results:
        print(f"{r['op']:<15} {r['bytes'] / MIB:>6.0f} {r['ms']:>9.3f} {r['algbw_gb_s']:>11.2f} "
              f"{r['busbw_gb_s']:>11.2f}")
    for op, why in skipped.items():
        print(f"{op}: skipped ({why})")
    print(f"written to {out}")


if __name__ == "__main__":
    sys.exit(worker())
