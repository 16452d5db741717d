"""A job for `gpucheckup try`: each item of its Dataset waits ITEM_MS (I/O-like: a sleep, no CPU), a batch of 8
in DataLoader(num_workers=0), a tiny model stepped by AdamW. Options: --steps N (default 10000: only --max-steps
ends it soon), --no-step (never steps an optimizer), --exit N (exits N at once), and $TRY_JOB_EXIT (exits with it
at once: a "fix" that breaks the job)."""
import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

ITEM_MS = 4.0

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10000)
p.add_argument("--no-step", action="store_true")
p.add_argument("--exit", type=int)
a = p.parse_args()
if a.exit is not None:
    sys.exit(a.exit)
if os.environ.get("TRY_JOB_EXIT"):
    sys.exit(int(os.environ["TRY_JOB_EXIT"]))


class Waits(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(ITEM_MS / 1000)
        return torch.ones(16)


model = torch.nn.Linear(16, 4)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
loader = DataLoader(Waits(), batch_size=8, num_workers=0)
for i, x in enumerate(loader):
    if i >= a.steps:
        break
    loss = model(x).sum()
    if not a.no_step:
        loss.backward()
        opt.step()
        opt.zero_grad()
