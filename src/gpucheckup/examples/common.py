"""What the example scripts share: device and size choice, the training loop, the closing line."""

from __future__ import annotations

import argparse
import time

DEFAULT_STEPS = 120  # ab drops the first 20 (warm-up) and measures the rest


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every example has."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"training steps (default {DEFAULT_STEPS})")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--small", action="store_true", help="CPU-sized problem (the default on a CPU)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    return p


def setup(args):
    """torch, the device, and whether to use the small sizes; seeds fixed."""
    import torch

    if args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    torch.manual_seed(args.seed)
    return torch, device, args.small or device.type != "cuda"


def needs_cuda(flag: str, device) -> None:
    """Stop with one line when a fix needs a GPU and the script runs on a CPU."""
    if device.type != "cuda":
        raise SystemExit(f"{flag} needs a CUDA device")


def train(step, steps: int, device, name: str) -> None:
    """Run `step()` `steps` times and print one line with the mean step time (the step times are the agent's)."""
    import torch

    t0 = time.perf_counter()
    for _ in range(steps):
        step()  # no synchronize here: it would change what bounds the job
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{name}: {steps} steps, {1000 * (time.perf_counter() - t0) / steps:.3f} ms per step on average")
