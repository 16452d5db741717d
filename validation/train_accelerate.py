"""An accelerate job: a small bf16 transformer language model under `Accelerator(mixed_precision="bf16")`.
Nothing is downloaded: a 4-layer encoder (width 256, 4 heads) over 128 random token ids of a 4096 vocabulary, batch 16
from a DataLoader that accelerate prepares, AdamW, `accelerator.backward`. A few hundred small kernels per step:
launch-bound on a large GPU. Fixes as flags (validation/common.py): --fused 1, --compile MODE, --workers N.
Usage: python3 train_accelerate.py [--steps 200] [--report R.json]
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import StepClock, compiled, fused, parse  # noqa: E402


class LM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, seq: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.body(self.emb(ids) + self.pos))


def main():
    args = parse(__doc__.splitlines()[0], batch=16, steps=200, warmup=20, seq=128, d=256, layers=4, vocab=4096)
    from accelerate import Accelerator

    torch.manual_seed(0)
    acc = Accelerator(mixed_precision="bf16" if args.device.startswith("cuda") else "no", cpu=args.device == "cpu")
    ids = torch.randint(0, args.vocab, (args.batch * 64, args.seq))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers, persistent_workers=args.workers > 0)
    model = LM(args.vocab, args.d, args.layers, args.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused(args))
    model, opt, loader = acc.prepare(model, opt, loader)
    step_model = compiled(model, args)
    clock = StepClock(args)
    go = True
    while go:
        for (x,) in loader:
            logits = step_model(x)
            loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, args.vocab).float(), x[:, 1:].reshape(-1))
            acc.backward(loss)
            opt.step()
            opt.zero_grad(set_to_none=True)
            go = clock.step_done()
            if not go:
                break
    clock.finish()


if __name__ == "__main__":
    main()
