"""A DataLoader factory for `gpucheckup dataloader` tests: a Dataset with a slow, CPU-bound __getitem__.

SPIN_MS (environment, default 4) of pure-Python arithmetic per sample, batches of BATCH (4) samples;
GPUCHECKUP_TEST_SLEEP_MS adds a sleep per sample (waiting, as on remote storage, instead of computing).
"""
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

SPIN_MS = float(os.environ.get("GPUCHECKUP_TEST_SPIN_MS", "4"))
SLEEP_MS = float(os.environ.get("GPUCHECKUP_TEST_SLEEP_MS", "0"))
BATCH = 4


class Slow(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        end = time.thread_time() + SPIN_MS / 1000  # CPU time, so a shared core stretches it in wall time
        x = 0
        while time.thread_time() < end:
            x += 1
        if SLEEP_MS:
            time.sleep(SLEEP_MS / 1000)
        return torch.full((16,), float(i % 7))


def make_loader(num_workers: int, pin_memory: bool):
    return DataLoader(Slow(), batch_size=BATCH, num_workers=num_workers, pin_memory=pin_memory)
