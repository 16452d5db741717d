"""A torchrun loop with fp16 autocast and a GradScaler, as many hand-written loops are: DDP over the ranks torchrun
starts (one is enough), a 12-block residual MLP (width 1024, batch 256), AdamW, and the running loss read on the host
every step for the log (`loss.item()`). GradScaler's step reads its inf check on the host too, unless the optimizer
is fused (then the check stays on the GPU). Fixes as flags (validation/common.py): --fused 1, --compile MODE, and
--log-every N (the host read every N steps only).
Usage: torchrun --nproc_per_node 1 train_amp_scaler.py [--steps 200] [--report R.json]
"""
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Block, StepClock, compiled, fused, parse  # noqa: E402


def main():
    args = parse(__doc__.splitlines()[0], batch=256, steps=200, warmup=20, width=1024, blocks=12, log_every=1)
    cuda = args.device.startswith("cuda")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    dev = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    net = nn.Sequential(*[Block(args.width) for _ in range(args.blocks)], nn.Linear(args.width, 10)).to(dev)
    model = nn.parallel.DistributedDataParallel(net, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused(args))
    scaler = torch.amp.GradScaler(dev.type, enabled=cuda)
    step_model = compiled(model, args)
    clock = StepClock(args)
    running, n = 0.0, 0
    while True:
        x = torch.randn(args.batch, args.width, device=dev)
        y = torch.randint(0, 10, (args.batch,), device=dev)
        with torch.autocast(dev.type, dtype=torch.float16, enabled=cuda):
            loss = nn.functional.cross_entropy(step_model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        n += 1
        if n % args.log_every == 0:
            running += loss.item()  # the log's host read
        if not clock.step_done():
            break
    if rank == 0:
        clock.finish()
    del model, step_model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
