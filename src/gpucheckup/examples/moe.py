"""MoE layer (the first seed article's script): a top-k mixture-of-experts layer whose dispatch
and combine move data (repeat_interleave, argsort, index_select, scatter, gather, index_add)
around two batched matmuls, and size its expert buffers with `int(counts.max())`, a host sync.

Configuration: --tokens, --experts, --topk, --d, --hidden. Fixes: --capacity F (a fixed expert
capacity of F x tokens x topk / experts: no host sync; tokens over capacity are dropped),
--tf32 (the fp32 matmuls on tensor cores), --compile (torch.compile the layer).
"""

from __future__ import annotations

from gpucheckup.examples import common


def moe_layer(torch, x, gate_w, w1, w2, topk=2, capacity=None):
    """Top-k MoE: route -> dispatch -> expert FFN -> combine (the seed's code; `capacity` is the fix)."""
    F = torch.nn.functional
    T, d = x.shape
    E = gate_w.shape[1]
    dev = x.device
    probs, idx = torch.topk(F.softmax(x @ gate_w, -1), topk, -1)  # route: each token picks topk experts
    flat_e = idx.reshape(-1)
    flat_w = probs.reshape(-1)
    flat_x = x.repeat_interleave(topk, dim=0)  # movement 1: copy
    src_tok = torch.arange(T, device=dev).repeat_interleave(topk)
    order = torch.argsort(flat_e)  # movement 2: sort
    sx = torch.index_select(flat_x, 0, order)  # movement 3: gather into groups
    sw, se = flat_w[order], flat_e[order]
    counts = torch.bincount(se, minlength=E)
    C = int(counts.max()) if capacity is None else capacity  # the seed's padding: a host sync
    offsets = torch.cumsum(counts, 0) - counts
    pos = torch.arange(T * topk, device=dev) - offsets[se]
    keep = pos < C  # with a fixed capacity, tokens over it are dropped
    buf = torch.zeros(E, C, d, device=dev, dtype=x.dtype)
    buf[se[keep], pos[keep]] = sx[keep]  # movement 4: scatter
    hh = F.relu(torch.bmm(buf, w1))  # the expert FFN: the only computing
    out = torch.bmm(hh, w2)
    gathered = out[se.clamp(max=E - 1), pos.clamp(max=C - 1)] * (sw * keep)[:, None]  # movement 5: gather
    back = torch.zeros(T * topk, d, device=dev, dtype=x.dtype)
    back[order] = gathered  # movement 6: unsort
    y = torch.zeros(T, d, device=dev, dtype=x.dtype)
    y.index_add_(0, src_tok, back)  # movement 7: combine
    return y


def build_parser():
    """The script's options: its configuration and one flag per fix."""
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=None, help="tokens T (default 8192; 256 when small)")
    p.add_argument("--d", type=int, default=None, help="model width (default 2048; 64 when small)")
    p.add_argument("--hidden", type=int, default=None, help="expert hidden width (default 1024; 128 when small)")
    p.add_argument("--experts", type=int, default=8, help="experts E (default 8)")
    p.add_argument("--topk", type=int, default=2, help="experts per token (default 2)")
    p.add_argument("--capacity", type=float, default=None, metavar="F",
                   help="fix: fixed expert capacity F x T x topk / E (no host sync)")
    p.add_argument("--tf32", action="store_true", help="fix: allow TF32 matmuls")
    p.add_argument("--compile", action="store_true", help="fix: torch.compile the layer")
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    torch, device, small = common.setup(args)
    if not 1 <= args.topk <= args.experts:
        raise SystemExit("--topk must be from 1 to --experts")
    T, d, h, E = args.tokens or (256 if small else 8192), args.d or (64 if small else 2048), \
        args.hidden or (128 if small else 1024), args.experts
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    x = torch.randn(T, d, device=device)
    gate_w = (torch.randn(d, E, device=device) * 0.02).requires_grad_()
    w1 = (torch.randn(E, d, h, device=device) * 0.02).requires_grad_()
    w2 = (torch.randn(E, h, d, device=device) * 0.02).requires_grad_()
    opt = torch.optim.SGD([gate_w, w1, w2], lr=1e-3)
    cap = None if args.capacity is None else max(1, int(args.capacity * T * args.topk / E))

    def layer(x, gate_w, w1, w2):
        return moe_layer(torch, x, gate_w, w1, w2, args.topk, cap)

    if args.compile:
        layer = torch.compile(layer)

    def step():
        opt.zero_grad(set_to_none=True)
        layer(x, gate_w, w1, w2).square().mean().backward()
        opt.step()

    common.train(step, args.steps, device, "moe")


if __name__ == "__main__":
    main()
