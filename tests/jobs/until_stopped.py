"""Trains until a stop file appears (argv: ready_file stop_file [optimizer|inference]); writes ready_file when running."""
import os
import sys
import time

import torch

ready, stop = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "optimizer"
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
deadline = time.time() + 120
n = 0
while not os.path.exists(stop) and time.time() < deadline:
    x = torch.randn(32, 64)
    if mode == "optimizer":
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:
        with torch.no_grad():
            model(x)
    n += 1
    if n == 3:
        with open(ready + ".tmp", "w") as f:  # whole or absent: the test reads it as soon as it exists
            f.write(str(os.getpid()))
        os.replace(ready + ".tmp", ready)
    time.sleep(0.01)
print(f"stopped after {n} iterations")
