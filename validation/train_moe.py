"""Mixture-of-experts training: a bf16 model of 4 MoE layers (16 experts of d=1024 -> 4096 -> 1024, top-2
routing), each expert's tokens gathered by a Python loop over experts, as simple MoE code does.

Batch 8192 tokens. Routing reads the tokens per expert back to the host (`.tolist()`, a sync per
layer), then runs the experts one by one: many mid-size GEMMs with host work between them.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import StepClock, compiled, parse  # noqa: E402


class MoE(nn.Module):
    def __init__(self, d, experts, hidden):
        super().__init__()
        self.gate = nn.Linear(d, experts, bias=False)
        self.up = nn.ModuleList(nn.Linear(d, hidden) for _ in range(experts))
        self.down = nn.ModuleList(nn.Linear(hidden, d) for _ in range(experts))

    def forward(self, x):
        w, idx = self.gate(x).softmax(-1).topk(2, dim=-1)
        flat = idx.flatten()
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=len(self.up)).tolist()  # host sync: tokens per expert
        token = order // 2
        out = torch.zeros_like(x)
        start = 0
        for e, n in enumerate(counts):
            if n:
                t = token[start:start + n]
                y = self.down[e](nn.functional.gelu(self.up[e](x[t])))
                out.index_add_(0, t, (y * w.flatten()[order[start:start + n]].unsqueeze(-1)).to(out.dtype))
            start += n
        return x + out


def main():
    args = parse(__doc__.splitlines()[0], batch=8192, d=1024, experts=16, hidden=4096, layers=4, steps=100,
                 warmup=15)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = nn.Sequential(*[MoE(args.d, args.experts, args.hidden) for _ in range(args.layers)]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    step_model = compiled(model, args)
    x = torch.randn(args.batch, args.d, device=dev)
    clock = StepClock(args)
    while True:
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = step_model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if not clock.step_done():
            break
    clock.finish()


if __name__ == "__main__":
    main()
