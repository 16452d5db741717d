"""Launch-bound training: 24 small residual MLP blocks, eager fp32, batch 64, AdamW.

Each block is Linear(512) + LayerNorm + GELU with a residual: thousands of microsecond kernels
per step, so the CPU's op dispatch and kernel launches set the pace and the GPU mostly idles.
Synthetic data made on the device (no DataLoader). The expected verdict is launch_bound.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Block, StepClock, compiled, fused, parse  # noqa: E402


def main():
    args = parse(__doc__.splitlines()[0], batch=64, d=512, blocks=24, steps=200, warmup=20, foreach=1)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = nn.Sequential(*[Block(args.d) for _ in range(args.blocks)], nn.Linear(args.d, 10)).to(dev)
    form = fused(args) or ({} if args.foreach else {"foreach": False})  # --foreach 0: the for-loop form
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **form)
    step_model = compiled(model, args)
    clock = StepClock(args)
    while True:
        x = torch.randn(args.batch, args.d, device=dev)
        y = torch.randint(0, 10, (args.batch,), device=dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bool(args.bf16)):
            loss = nn.functional.cross_entropy(step_model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not clock.step_done():
            break
    clock.finish()


if __name__ == "__main__":
    main()
