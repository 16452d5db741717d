"""Launch-bound plain loop with mixed precision: a timm ResNet-18 built from its config (no weights), bf16 autocast,
batch 16 of 64x64 synthetic images made on the device, SGD with momentum.

A small batch of small images leaves each of the network's few hundred kernels per step a few microseconds of work,
so the host's dispatch sets the pace (launch-bound). torchvision's ResNet-18 stands in where timm is missing.
`--paired OUT.json` runs the light window's paired phases in the loop instead (validation/paired_steps.py).
Usage: python3 train_timm_amp.py [--steps 300] [--report R.json] [--paired OUT.json]
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import StepClock, compiled, fused, parse  # noqa: E402


def build(name: str) -> nn.Module:
    try:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=100)
    except ImportError:
        import torchvision

        return getattr(torchvision.models, name)(num_classes=100)


def main():
    args = parse(__doc__.splitlines()[0], batch=16, steps=300, warmup=30, size=64, model="resnet18", paired="")
    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = build(args.model).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **fused(args))
    step_model = compiled(model, args)
    hook = None
    if args.paired:
        from paired_steps import PairedSteps

        hook = PairedSteps(torch, args.paired, args)
    clock = StepClock(args)
    amp = torch.bfloat16
    while True:
        x = torch.randn(args.batch, 3, args.size, args.size, device=dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, 100, (args.batch,), device=dev)
        with torch.autocast(dev.type, dtype=amp):
            loss = nn.functional.cross_entropy(step_model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        go = clock.step_done()
        if hook is not None:
            if hook.step_end():
                break
        elif not go:
            break
    clock.finish()
    if hook is not None:
        hook.finish()


if __name__ == "__main__":
    main()
