"""Shared by the validation jobs: how long to run, and each step's wall time measured by the job itself.

The job records time.perf_counter() at the end of every step (no synchronization, which would
change the job), plus one synchronized block: from the end of step `--warmup` to the end of the
last step, with torch.cuda.synchronize() at both ends. `--report FILE` writes them as JSON, so
the overhead measurement does not depend on gpucheckup's own figures.
"""

import argparse
import json
import statistics
import time

import torch
from torch import nn


# The fixes a job can be run with (the framework corpus measures each against the job as it is): --fused 1 (the
# optimizer built with fused=True), --compile MODE (torch.compile, "default" or "reduce-overhead"), --workers N and
# --pin 1 (the DataLoader's), --tf32 1, --cudnn-benchmark 1, --bf16 1 (bf16 autocast, in the framework's own words
# where it has them). 0 or "" is the job as written.
FIXES = dict(fused=0, compile="", workers=0, pin=0, tf32=0, cudnn_benchmark=0, bf16=0)


def parse(description: str, **defaults) -> argparse.Namespace:
    defaults = {**FIXES, **defaults}
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=defaults.get("steps", 100), help="optimizer steps to run")
    p.add_argument("--seconds", type=float, default=None, help="run until this much time has passed instead")
    p.add_argument("--warmup", type=int, default=defaults.get("warmup", 10), help="steps left out of the figures")
    p.add_argument("--batch", type=int, default=defaults["batch"])
    p.add_argument("--report", help="write per-step wall times (ms) and the synchronized block time here")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, value in defaults.items():
        if name not in ("steps", "warmup", "batch"):
            p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args()
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    return args


def compiled(model, args):
    """The model, compiled when the job runs with --compile MODE."""
    return torch.compile(model, mode=args.compile) if args.compile else model


def fused(args) -> dict:
    """The optimizer's keyword for --fused 1 (torch's default form otherwise)."""
    return {"fused": True} if args.fused else {}


class StepClock:
    """Wall time at the end of every step, and a synchronized block after warm-up."""

    def __init__(self, args):
        self.args = args
        self.ends = []
        self.block_start = None
        self.t0 = time.time()

    def sync(self):
        if self.args.device.startswith("cuda"):
            torch.cuda.synchronize()

    def step_done(self) -> bool:
        """Record a step's end; True while the job should go on."""
        self.ends.append(time.perf_counter())
        n = len(self.ends)
        if n == self.args.warmup:
            self.sync()
            self.block_start = (time.perf_counter(), n)
        if self.args.seconds is not None:
            return time.time() - self.t0 < self.args.seconds
        return n < self.args.steps

    def finish(self) -> dict:
        self.sync()
        end = time.perf_counter()
        ms = [1000 * (b - a) for a, b in zip(self.ends[:-1], self.ends[1:])]
        after = ms[self.args.warmup:] if len(ms) > self.args.warmup else ms
        out = {
            "steps": len(self.ends),
            "step_ms": [round(x, 4) for x in ms],  # ms[i] = step i+2 (from the end of step i+1)
            "median_ms_after_warmup": statistics.median(after) if after else None,
            "block_ms_per_step": (1000 * (end - self.block_start[0]) / (len(self.ends) - self.block_start[1])
                                  if self.block_start and len(self.ends) > self.block_start[1] else None),
            "warmup": self.args.warmup,
        }
        if self.args.report:
            with open(self.args.report, "w") as f:
                json.dump(out, f)
        print(f"{out['steps']} steps, median {out['median_ms_after_warmup']:.2f} ms after {self.args.warmup} "
              f"warm-up steps" if out["median_ms_after_warmup"] else f"{out['steps']} steps")
        return out


class Block(nn.Module):
    """The residual MLP block of the launch-bound jobs: Linear(d) + LayerNorm + GELU, with a residual."""

    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return x + nn.functional.gelu(self.norm(self.fc(x)))
