"""Sync-bound training: a bf16 MLP whose every block logs a statistic with .item(), and a per-parameter
gradient-norm check after backward (each .item() waits for the GPU to drain, then the host launches the rest).

8 blocks of Linear(2048) + GELU, batch 512, AdamW. The GPU idles while the host, after each
synchronization, launches the next kernels. The expected verdict is sync_bound.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import StepClock, fused, parse  # noqa: E402


def forward(blocks, x, stats, reads):
    """The model's forward: each block's output logs a statistic (read on the host with .item() when `reads`)."""
    h = x
    for b in blocks:
        h = nn.functional.gelu(b(h))
        stat = h.float().abs().mean()
        stats.append(stat.item() if reads else stat.detach())  # .item(): a host-GPU sync per block
    return h.float().square().mean()


def main():
    args = parse(__doc__.splitlines()[0], batch=512, d=2048, blocks=8, steps=150, warmup=20, reads=1)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    blocks = nn.ModuleList(nn.Linear(args.d, args.d) for _ in range(args.blocks)).to(dev)
    opt = torch.optim.AdamW(blocks.parameters(), lr=1e-4, **fused(args))
    x = torch.randn(args.batch, args.d, device=dev)
    clock = StepClock(args)
    stats = []
    # --compile MODE: the forward compiled as a user would (torch.compile breaks its graph at each .item())
    step_forward = torch.compile(forward, mode=args.compile) if args.compile else forward
    while True:
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = step_forward(blocks, x, stats, args.reads)
        loss.backward()
        if args.reads:  # a sync per parameter
            norms = [p.grad.norm().item() for p in blocks.parameters()]
            if max(norms) < float("inf"):
                opt.step()
        else:  # --reads 0, the fix as the check-up models it: no host reads (the statistics stay tensors, read when
            opt.step()  # logged; the per-step norm check goes), nothing added on the GPU
        if len(stats) > 10 * args.blocks:
            del stats[:-args.blocks]
        opt.zero_grad(set_to_none=True)
        if not clock.step_done():
            break
    clock.finish()


if __name__ == "__main__":
    main()
