"""Communication-bound: data-parallel training whose gradients are all-reduced one tensor at a
time after backward, blocking: nothing overlaps the communication. Run it under
`torchrun --nproc-per-node N -m gpucheckup.examples.comm` (alone it runs as one rank).

Fix: --ddp (DistributedDataParallel: gradients bucketed and all-reduced during backward).
"""

from __future__ import annotations

import gc
import os

from gpucheckup.examples import common


def build_parser():
    """The script's options: its configuration and one flag per fix."""
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=None, help="linear layers (default 16; 4 when small)")
    p.add_argument("--width", type=int, default=None, help="width (default 4096; 128 when small)")
    p.add_argument("--batch", type=int, default=None, help="batch per rank (default 64; 16 when small)")
    p.add_argument("--ddp", action="store_true", help="fix: DistributedDataParallel (overlapped, bucketed)")
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    torch, device, small = common.setup(args)
    dist = torch.distributed
    if "RANK" in os.environ:  # under torchrun
        rank = int(os.environ["RANK"])
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    else:
        rank = 0
        # One rank alone: an in-memory store (a FileStore of world size 1 can hang a re-initialised group,
        # pytorch/pytorch#31467, #55967, and leaves its file behind).
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(),
                                rank=0, world_size=1)
    try:
        _train(args, torch, device, small, rank)
    finally:
        # The model, its DDP reducer and their autograd hooks are freed before the group goes: a gloo group
        # destroyed while DDP's reducer still holds it hung about one run in fifteen when the reducer was freed
        # afterwards (at main's return), on torch 2.13's CPU build.
        gc.collect()
        dist.destroy_process_group()


def _train(args, torch, device, small: bool, rank: int) -> None:
    """Build the model (DDP-wrapped with --ddp) and train it; every reference to it ends with this call."""
    dist, nn = torch.distributed, torch.nn
    layers, width, batch = args.layers or (4 if small else 16), args.width or (128 if small else 4096), \
        args.batch or (16 if small else 64)
    torch.manual_seed(args.seed)  # every rank starts from the same weights
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)]).to(device)
    if args.ddp:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch.manual_seed(args.seed + 1 + rank)
    x = torch.randn(batch, width, device=device)
    world = dist.get_world_size()

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        if not args.ddp:
            for prm in model.parameters():  # one blocking all-reduce per tensor, after backward
                dist.all_reduce(prm.grad)
                prm.grad /= world
        opt.step()

    common.train(step, args.steps, device, f"comm rank {rank}")

if __name__ == "__main__":
    main()
