"""Input-bound: a small conv net fed by a DataLoader that augments every image on the CPU in the
main process (num_workers=0): the GPU waits for each batch.

Fixes: --workers N (DataLoader worker processes), --pin-memory (pinned batches, non_blocking copy).
"""

from __future__ import annotations

from gpucheckup.examples import common


def build_parser():
    """The script's options: its configuration and one flag per fix."""
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None, help="image side (default 160; 32 when small)")
    p.add_argument("--batch", type=int, default=None, help="batch (default 128; 8 when small)")
    p.add_argument("--aug-passes", type=int, default=6, help="augmentation passes per image (default 6)")
    p.add_argument("--workers", type=int, default=0, help="fix: DataLoader workers (default 0: in-process)")
    p.add_argument("--pin-memory", action="store_true", help="fix: pin batches, copy with non_blocking=True")
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    torch, device, small = common.setup(args)
    nn = torch.nn
    size, batch = args.size or (32 if small else 160), args.batch or (8 if small else 128)
    data = Augmented(torch, size, args.aug_passes, batch * args.steps + batch)
    loader = torch.utils.data.DataLoader(data, batch_size=batch, num_workers=args.workers,
                                         pin_memory=args.pin_memory and device.type == "cuda")
    model = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = iter(loader)
    nb = args.pin_memory and device.type == "cuda"

    def step():
        x, y = next(batches)
        x, y = x.to(device, non_blocking=nb), y.to(device, non_blocking=nb)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    common.train(step, args.steps, device, "input")


class Augmented:
    """Synthetic images, each augmented on the CPU (blur, noise, flip) `passes` times."""

    def __init__(self, torch, size: int, passes: int, n: int):
        self.torch, self.size, self.passes, self.n = torch, size, passes, n
        self.kernel = torch.ones(3, 1, 3, 3) / 9

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        torch = self.torch
        g = torch.Generator().manual_seed(i)
        img = torch.rand(1, 3, self.size, self.size, generator=g)
        for _ in range(self.passes):
            img = torch.nn.functional.conv2d(img, self.kernel, padding=1, groups=3)
            img = (img + 0.01 * torch.randn(img.shape, generator=g)).flip(-1)
        return img[0], i % 10


if __name__ == "__main__":
    main()
