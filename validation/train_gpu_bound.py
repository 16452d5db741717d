"""GPU-bound training that the profiler makes look launch-bound: a 4-layer bf16 transformer
encoder (d=1024, 8 heads, batch 8 x 1024 tokens) with fused AdamW.

Without the profiler the GPU is busy about 90% of each step; torch.profiler roughly doubles the
host's time per op, so the profiled steps show a mostly idle GPU. `gpucheckup run` records the
unprofiled steps in steps.csv and corrects for it: the expected verdict is gpu_bound.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import StepClock, compiled, parse  # noqa: E402


def main():
    args = parse(__doc__.splitlines()[0], batch=8, d=1024, layers=4, seq=1024, steps=120, warmup=10)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    layer = nn.TransformerEncoderLayer(args.d, 8, 4 * args.d, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False),
                          nn.Linear(args.d, 8192, bias=False)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    x = torch.randn(args.batch, args.seq, args.d, device=dev)
    step_model = compiled(model, args)
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
