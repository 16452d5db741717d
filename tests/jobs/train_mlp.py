"""A small real training job: MLP, DataLoader (num_workers=0), AdamW; argv: steps [sleep_s]."""
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 8))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(16 * steps, 32), torch.randint(0, 8, (16 * steps,)))
done = 0
for x, y in DataLoader(data, batch_size=16, num_workers=0):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    done += 1
    time.sleep(pause)
print(f"trained {done} steps")
print("a line on stderr", file=sys.stderr)
