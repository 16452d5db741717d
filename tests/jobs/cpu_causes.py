"""A CPU training loop with one planted host-side cause, for the CPU-side check-up's findings and fixes.

    python tests/jobs/cpu_causes.py loader STEPS    # a slow Dataset (time.sleep per sample), num_workers=0
    python tests/jobs/cpu_causes.py python STEPS    # pure Python between operators each step (no DataLoader)
    python tests/jobs/cpu_causes.py ops STEPS       # operator-heavy steps (wide matmuls) on one intra-op thread

At the end it prints, on its own clock (time.perf_counter), the median ms per step the loop spent in what it
planted: `wait_ms` (inside next() on the DataLoader's iterator), `python_ms` (the Python loop) or `step_ms` (the
whole step, for `ops`), over the steps after the first 3. Every mode runs one intra-op thread
(torch.set_num_threads(1)), as torchrun's default OMP_NUM_THREADS=1 does.
"""
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

SLEEP_S = 0.003  # per sample: a batch of 8 waits 24 ms
PYTHON_ITERS = 100_000  # a Python loop of about 10-15 ms on one core


class Slow(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(SLEEP_S)  # stands for reading and decoding a sample
        return torch.full((32,), float(i % 7))


def main() -> None:
    mode, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)  # tiny matrices: a second intra-op thread only spins against a loaded machine's others
    width = 512 if mode == "ops" else 32
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.ReLU(), torch.nn.Linear(4 * width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(DataLoader(Slow(), batch_size=8, num_workers=0)) if mode == "loader" else None
    fixed = torch.randn(256 if mode == "ops" else 8, width)
    planted = []
    for _ in range(steps):
        t0 = time.perf_counter()
        if mode == "loader":
            x = next(it)
        elif mode == "ops":
            x = fixed
        else:
            x = fixed
            acc = 0
            for k in range(PYTHON_ITERS):  # per-step Python bookkeeping with no operator running
                acc += k * k % 7
        if mode != "ops":
            planted.append(time.perf_counter() - t0)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if mode == "ops":
            planted.append(time.perf_counter() - t0)
    key = {"loader": "wait_ms", "python": "python_ms", "ops": "step_ms"}[mode]
    print(f"{key} {1e3 * statistics.median(planted[3:]):.3f}", flush=True)


if __name__ == "__main__":
    main()
