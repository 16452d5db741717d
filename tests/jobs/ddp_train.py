"""A small data-parallel training job for the many-rank tests: DDP (or FSDP2 `fully_shard`) over
torchrun, NCCL on GPUs and gloo on CPUs, synthetic data.

    torchrun --nproc_per_node 2 tests/jobs/ddp_train.py --steps 20 [--fsdp] [--slow-rank 1 --slow-ms 40]

Batches come from a DataLoader (num_workers=0) over a synthetic dataset. `--slow-rank R --slow-ms MS`
makes rank R's dataset spend MS ms of host time building each batch (a slow input pipeline on
one rank): the other ranks wait for it at the gradient all-reduce. `--slow-kind host` spins MS ms
in Python instead, `--slow-kind compute` gives rank R a `--slow-factor` times larger batch.
Each rank prints its median step time (its own `time.perf_counter()`), so tests can check
gpucheckup's figures against it.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    """A few random batches made up front and served in turn (no host cost per batch); `sleep_ms` of
    host time per batch stands for slow decoding or augmentation."""

    def __init__(self, n: int, batch: int, width: int, seed: int, sleep_ms: float) -> None:
        self.n, self.sleep_ms = n, sleep_ms
        gen = torch.Generator().manual_seed(seed)
        self.pool = [torch.randn(batch, width, generator=gen) for _ in range(2)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sleep_ms > 0:
            time.sleep(self.sleep_ms / 1e3)
        return self.pool[i % len(self.pool)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--fsdp", action="store_true", help="FSDP2 fully_shard per layer instead of DDP")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--slow-kind", choices=("input", "host", "compute"), default="input",
                   help="input: its DataLoader sleeps --slow-ms per batch; host: it spins --slow-ms in Python "
                        "before each forward; compute: its batch is --slow-factor times larger")
    p.add_argument("--slow-factor", type=int, default=3)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, device_id=device if cuda else None)
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(device)
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    slow = rank == args.slow_rank
    sleep_ms = args.slow_ms if slow and args.slow_kind == "input" else 0.0
    spin_s = args.slow_ms / 1e3 if slow and args.slow_kind == "host" else 0.0
    batch = args.batch * args.slow_factor if slow and args.slow_kind == "compute" else args.batch
    loader = DataLoader(Batches(args.steps, batch, args.width, rank, sleep_ms), batch_size=None, num_workers=0)
    times = []
    t0 = time.perf_counter()
    for x in loader:
        if spin_s:  # host work outside any operator: metrics, logging, Python bookkeeping on one rank
            t_spin = time.perf_counter()
            while time.perf_counter() - t_spin < spin_s:
                pass
        x = x.to(device, non_blocking=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        times.append((t1 - t0) * 1e3)
        t0 = t1
    tail = times[len(times) // 2:]
    print(f"rank {rank} median step {statistics.median(tail):.2f} ms", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
