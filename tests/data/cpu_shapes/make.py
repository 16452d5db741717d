"""Make the CPU shape-FLOPs test traces: small models whose ops cover each FLOP formula
(strided/padded/grouped/dilated/transposed convolutions in 1-3D, broadcast matmul, linear on
3-D input, bmm/baddbmm/addbmm, SDPA) profiled with record_shapes on the CPU, and each step's
FLOPs counted by torch.utils.flop_counter.FlopCounterMode. Run with any torch build:

    python tests/data/cpu_shapes/make.py tests/data/cpu_shapes
"""

import gzip
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.flop_counter import FlopCounterMode


class Convs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 5, stride=2, padding=2)
        self.c2 = torch.nn.Conv2d(16, 32, 3, padding=2, dilation=2, groups=4, bias=False)
        self.c3 = torch.nn.Conv2d(32, 32, 3, padding="same")
        self.c4 = torch.nn.Conv1d(8, 12, 3, stride=2)
        self.c5 = torch.nn.Conv3d(2, 4, 3, padding=1)
        self.t1 = torch.nn.ConvTranspose2d(32, 8, 4, stride=2, padding=1)

    def forward(self, x, y, z):
        h = self.t1(self.c3(self.c2(self.c1(x))))
        return h.sum() + self.c4(y).sum() + self.c5(z).sum()


class Mats(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(64, 96)
        self.l2 = torch.nn.Linear(96, 64, bias=False)
        self.w = torch.nn.Parameter(torch.randn(64, 48))
        self.c = torch.nn.Parameter(torch.randn(4, 10, 48))

    def forward(self, x):  # x: [4, 10, 64]
        h = self.l2(torch.relu(self.l1(x)))  # linear on 3-D input
        m = torch.matmul(h, self.w)  # broadcast matmul
        b = torch.baddbmm(self.c, h, self.w.expand(4, 64, 48))
        q = k = v = h.view(4, 10, 4, 16).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v)
        s = torch.addbmm(torch.zeros(10, 48), h, self.w.expand(4, 64, 48))
        return m.sum() + b.sum() + a.sum() + s.sum() + torch.bmm(h, h.transpose(1, 2)).sum()


def run(name, model, inputs, out: Path):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        model(*inputs).backward()
        opt.step()

    with FlopCounterMode(display=False) as fc:
        step()
    flops = fc.get_total_flops()
    path = out / f"{name}.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            step()
            prof.step()
    (out / f"{name}.json.gz").write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    return {"flops_per_step": flops, "by_op": {str(k): v for k, v in fc.get_flop_counts()["Global"].items()}}


def main(out: Path):
    torch.manual_seed(0)
    meta = {
        "torch": torch.__version__,
        "convs": run("convs", Convs(), (torch.randn(2, 3, 32, 32), torch.randn(2, 8, 33), torch.randn(1, 2, 6, 6, 6)),
                     out),
        "mats": run("mats", Mats(), (torch.randn(4, 10, 64),), out),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
