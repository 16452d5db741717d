"""Launch-bound: many small residual MLP blocks at a small batch, run eagerly: thousands of
microsecond kernels, each costing the host more to launch than the GPU to run.

Fixes: --fused (AdamW's fused kernel: one launch per parameter group), --foreach (AdamW over
tensor lists), --compile (torch.compile: fused elementwise chains), --cuda-graphs
(torch.compile mode="reduce-overhead": the step replayed as CUDA graphs; needs a GPU).
"""

from __future__ import annotations

from gpucheckup.examples import common


def build_parser():
    """The script's options: its configuration and one flag per fix."""
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=None, help="residual blocks (default 24; 8 when small)")
    p.add_argument("--width", type=int, default=None, help="block width (default 512; 64 when small)")
    p.add_argument("--batch", type=int, default=None, help="batch (default 64; 16 when small)")
    p.add_argument("--fused", action="store_true", help="fix: AdamW(fused=True)")
    p.add_argument("--foreach", action="store_true", help="fix: AdamW(foreach=True)")
    p.add_argument("--compile", action="store_true", help="fix: torch.compile the model")
    p.add_argument("--cuda-graphs", action="store_true", help="fix: torch.compile(mode='reduce-overhead')")
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    torch, device, small = common.setup(args)
    nn = torch.nn
    blocks, width, batch = args.blocks or (8 if small else 24), args.width or (64 if small else 512), \
        args.batch or (16 if small else 64)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.fc1, self.fc2 = nn.LayerNorm(width), nn.Linear(width, width), nn.Linear(width, width)

        def forward(self, x):
            return x + self.fc2(torch.relu(self.fc1(self.norm(x))))

    model = nn.Sequential(*[Block() for _ in range(blocks)]).to(device)
    if args.cuda_graphs:
        common.needs_cuda("--cuda-graphs", device)
        model = torch.compile(model, mode="reduce-overhead")
    elif args.compile:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True if args.fused else None,
                            foreach=True if args.foreach else (False if not args.fused else None))
    x = torch.randn(batch, width, device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()

    common.train(step, args.steps, device, "launch")


if __name__ == "__main__":
    main()
