"""Trains until SIGTERM; the handler writes a marker, then exits as argv[2] says: 'die' (by the signal) or a code."""
import os
import signal
import sys
import time

import torch

marker, how = sys.argv[1], sys.argv[2]
ready = marker + ".ready"


def on_term(signum, frame):
    open(marker, "w").write(f"SIGTERM {signum}")
    if how == "die":
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    sys.exit(int(how))


signal.signal(signal.SIGTERM, on_term)
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
deadline = time.time() + 120
n = 0
while time.time() < deadline:
    opt.zero_grad()
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
    n += 1
    if n == 3:
        open(ready, "w").write("ready")
    time.sleep(0.01)
