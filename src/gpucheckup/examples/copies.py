"""Copy-bound: a small MLP fed a large batch from pageable host memory every step, its
predictions copied back: each copy stages through a bounce buffer and blocks the host.

Fix: --pin-memory (pinned host buffers, allocated once, copied with non_blocking=True). The
predictions are read on the host one step later (after waiting for their copy's event), as a job
that uses them must: the host can overlap one step's copy back with the next step, but cannot run
ahead of the GPU, so the step time measured on the host is the GPU's throughput.
"""

from __future__ import annotations

from gpucheckup.examples import common


def build_parser():
    """The script's options: its configuration and one flag per fix."""
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=None, help="input batch size in MB (default 256; 4 when small)")
    p.add_argument("--pin-memory", action="store_true", help="fix: pinned buffers and non_blocking copies")
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    torch, device, small = common.setup(args)
    nn = torch.nn
    width = 256
    rows = int((args.mb or (4 if small else 256)) * 2**20 / 4 / width)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    pin = args.pin_memory and device.type == "cuda"  # a CPU run has nothing to pin
    host_x = torch.randn(rows, width, pin_memory=pin)
    host_out = torch.empty(rows, width, pin_memory=pin)
    copied = torch.cuda.Event() if pin else None  # the last copy back, waited for before its values are read
    seen = []

    def step():
        if copied is not None:
            copied.synchronize()
        seen.append(float(host_out[0, 0]))  # the job reads last step's predictions
        opt.zero_grad(set_to_none=True)
        x = host_x.to(device, non_blocking=pin)
        y = model(x)
        y.square().mean().backward()
        opt.step()
        host_out.copy_(y.detach(), non_blocking=pin)  # the predictions, back on the host
        if copied is not None:
            copied.record()

    common.train(step, args.steps, device, "copies")


if __name__ == "__main__":
    main()
