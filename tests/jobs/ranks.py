"""Each torchrun rank trains its own small model for argv[1] steps (no process group needed)."""
import os
import sys

import torch

torch.manual_seed(int(os.environ.get("RANK", "0")))
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(int(sys.argv[1])):
    opt.zero_grad()
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
print(f"rank {os.environ.get('RANK')} done")
