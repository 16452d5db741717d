"""Input-bound training: a ResNet-18-like conv net fed by CPU-heavy numpy augmentation, num_workers=0.

torch only (no torchvision): synthetic uint8 images, per-sample random crop, flip, colour jitter
and `--aug-passes` box blurs in numpy, in the training process (DataLoader num_workers=0,
pin_memory=False). bf16 autocast and channels_last on the GPU; SGD with momentum. The GPU
waits for every batch: the expected verdict is input_bound.
"""

import os
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import StepClock, parse  # noqa: E402


class SyntheticImages(Dataset):
    """Random images, augmented on the CPU like a real vision pipeline would."""

    def __init__(self, size: int, passes: int, n: int = 10**7):
        self.size, self.passes, self.n = size, passes, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        s = self.size
        img = rng.integers(0, 256, (s + 16, s + 16, 3), dtype=np.uint8)
        y, x = rng.integers(0, 17, 2)
        a = img[y:y + s, x:x + s].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            a = a[:, ::-1]
        a = a * rng.uniform(0.8, 1.2, 3).astype(np.float32) + rng.uniform(-0.1, 0.1, 3).astype(np.float32)
        for _ in range(self.passes):  # 3x3 box blur
            p = np.pad(a, ((1, 1), (1, 1), (0, 0)), mode="edge")
            a = sum(p[dy:dy + s, dx:dx + s] for dy in range(3) for dx in range(3)) / 9.0
        a = (a - 0.45) / 0.25
        return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1))), int(rng.integers(0, 1000))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.skip(x))


def resnet18ish(classes: int = 1000) -> nn.Module:
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def main():
    args = parse(__doc__.splitlines()[0], batch=128, size=160, aug_passes=6, steps=40, warmup=5)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = resnet18ish().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(SyntheticImages(args.size, args.aug_passes), batch_size=args.batch, num_workers=args.workers,
                        pin_memory=bool(args.pin), persistent_workers=args.workers > 0)
    clock = StepClock(args)
    for x, y in loader:
        x = x.to(dev, non_blocking=bool(args.pin)).to(memory_format=torch.channels_last)
        y = y.to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not clock.step_done():
            break
    clock.finish()


if __name__ == "__main__":
    main()
