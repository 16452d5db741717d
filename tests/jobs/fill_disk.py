"""Trains, and fills the file system at a path after one step (the disk runs full during the profiled
window); argv: steps fill_after_step filler_path free_at_end(1|0)."""
import os
import sys

import torch

steps, fill_after, filler, free_at_end = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for n in range(1, steps + 1):
    model(torch.randn(8, 32)).square().mean().backward()
    opt.step()
    if n == fill_after:
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 16))
                    f.flush()
            except OSError as e:
                print(f"disk full: {e.strerror}")
if free_at_end:
    os.unlink(filler)
print(f"trained {steps} steps")
