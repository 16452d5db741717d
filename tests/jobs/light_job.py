"""A CPU training job with three host phases of known length: argv: steps, report.json.

Each step: the DataLoader's __getitem__ sleeps LOAD_S (num_workers=0, so on the main thread), a small MLP
trains, and `log_metrics` sleeps PY_S in plain Python. The job writes, per step, the wall time spent
in each phase (time.perf_counter around them) and the step's end in Unix time, to report.json.
Each sleep is longer by a random part of up to JITTER_S, as a real job's phases vary. (This was once thought to
cure aliasing with the sampler's 10 ms period; py-spy samples at random, exponential intervals, so there is none:
the misses it was meant to cure were the sampling error of a short window, sqrt(p(1-p)/N).)
"""
import json
import random
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

LOAD_S = 0.030
PY_S = 0.020
JITTER_S = 0.010
rng = random.Random(0)


class SlowData(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(LOAD_S + rng.uniform(0.0, JITTER_S))
        return torch.randn(32)


def log_metrics():
    time.sleep(PY_S + rng.uniform(0.0, JITTER_S))


steps = int(sys.argv[1])
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
rows = []
it = iter(DataLoader(SlowData(), batch_size=1, num_workers=0))
for n in range(1, steps + 1):
    t0 = time.perf_counter()
    x = next(it)
    t1 = time.perf_counter()
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
    t2 = time.perf_counter()
    log_metrics()
    t3 = time.perf_counter()
    rows.append({"step": n, "load_s": t1 - t0, "train_s": t2 - t1, "python_s": t3 - t2, "end_epoch_s": time.time()})
with open(sys.argv[2], "w") as f:
    json.dump(rows, f)
