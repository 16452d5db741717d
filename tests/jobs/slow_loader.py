"""Input-bound on the CPU: heavy per-sample numpy work in DataLoader(num_workers=0); runs argv[1] seconds,
and creates the file argv[2] (when given) once its first step is done."""
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Heavy(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        a = np.random.default_rng(i).random((96, 96))
        for _ in range(12):
            a = np.tanh(a @ a.T / 96)
        return torch.from_numpy(a.astype(np.float32)).flatten()[:64]


model = torch.nn.Linear(64, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.time() + float(sys.argv[1])
for x in DataLoader(Heavy(), batch_size=16, num_workers=0):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    if len(sys.argv) > 2 and not Path(sys.argv[2]).exists():
        Path(sys.argv[2]).write_text("stepping")
    if time.time() > end:
        break
