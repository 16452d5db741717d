"""Sync-bound: a classifier that reads GPU values on the host every step (`.item()` after every
block for a NaN check and the loss for logging): the host waits for the GPU at each read, so
the GPU drains its queue and idles.

Fix: --no-sync (checks and loss accumulated on the device, read every --log-every steps). Its
Linear layers run in fp32 (SIMT GEMMs), so the check-up also offers --tf32 (the fp32 matmuls on
tensor cores) and --bf16 (the forward and loss under bf16 autocast).
"""

from __future__ import annotations

from gpucheckup.examples import common


def build_parser():
    """The script's options: its configuration and one flag per fix."""
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=None, help="linear layers (default 8; 4 when small)")
    p.add_argument("--width", type=int, default=None, help="width (default 4096; 128 when small)")
    p.add_argument("--batch", type=int, default=None, help="batch (default 1024; 32 when small)")
    p.add_argument("--no-sync", action="store_true", help="fix: keep the checks on the device")
    p.add_argument("--tf32", action="store_true", help="fix: allow TF32 matmuls")
    p.add_argument("--bf16", action="store_true", help="fix: bf16 autocast for the forward and the loss")
    p.add_argument("--log-every", type=int, default=50, help="with --no-sync: read the values every N steps")
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    torch, device, small = common.setup(args)
    nn = torch.nn
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    layers, width, batch = args.layers or (4 if small else 8), args.width or (128 if small else 4096), \
        args.batch or (32 if small else 1024)
    blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(layers)]).to(device)
    opt = torch.optim.AdamW(blocks.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    bad = torch.zeros((), device=device)
    n, logged = [0], []

    def step():
        nonlocal bad
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            h = x
            for b in blocks:
                h = torch.relu(b(h))
                if args.no_sync:
                    bad = bad + torch.isnan(h).any()
                elif torch.isnan(h).any().item():  # a host read of a GPU value: a sync
                    raise SystemExit("NaN")
            loss = h.float().square().mean()
        loss.backward()
        opt.step()
        n[0] += 1
        if not args.no_sync:
            logged.append(loss.item())  # logging every step: another sync
        elif n[0] % args.log_every == 0:
            if bad.item():
                raise SystemExit("NaN")
            logged.append(loss.item())

    common.train(step, args.steps, device, "sync")


if __name__ == "__main__":
    main()
