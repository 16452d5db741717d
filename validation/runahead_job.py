"""A GPU-bound job whose host never waits for its GPU (no host read of a GPU value): `ab`'s run-ahead check.

Each step: a few large matmuls, backward, an SGD step; nothing is read back, so the host queues steps
until CUDA's launch queue is full. With --sync the loss is read every step (`.item()`), so the host keeps
pace with the GPU. Both variants do the same GPU work: `ab` on the GPU's clock should find no difference,
and on the host's clock a large "saving" for the side that ran ahead.

    gpucheckup ab -- python validation/runahead_job.py --sync -- python validation/runahead_job.py
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--width", type=int, default=8192)
    p.add_argument("--layers", type=int, default=1, help="few kernels per step: CUDA's queue holds many steps")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--sync", action="store_true", help="read the loss on the host every step")
    a = p.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    width = a.width if dev == "cuda" else 64
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(a.layers)]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(a.batch if dev == "cuda" else 32, width, device=dev)
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        if a.sync:
            loss.item()
    if dev == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
