"""Launch-bound Lightning job: a residual MLP (16 blocks of Linear(512) + LayerNorm + GELU) in a LightningModule,
synthetic data through a DataLoader, Lightning's Trainer (AdamW; no logger, checkpoints or progress bar).

Lightning calls `optimizer.step(closure)`, so the forward and backward run inside the optimizer's step. Batch 64:
the host's dispatch of a few hundred small kernels sets the pace (launch-bound).
`--paired OUT.json` runs the light window's paired phases in the loop instead (validation/paired_steps.py).
Each step's end is timed by a Callback (validation/common.py's StepClock), so `--report` works as in the other jobs.
Usage: python3 train_lightning.py [--steps 300] [--report R.json] [--paired OUT.json]
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Block, StepClock, compiled, fused, parse  # noqa: E402


def main():
    args = parse(__doc__.splitlines()[0], batch=64, steps=300, warmup=30, d=512, blocks=16, paired="")
    try:
        import lightning as L
    except ImportError:  # the older package name
        import pytorch_lightning as L

    class MLP(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = compiled(nn.Sequential(*[Block(args.d) for _ in range(args.blocks)], nn.Linear(args.d, 10)),
                                args)

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3, **fused(args))

    hook = None
    if args.paired:
        from paired_steps import PairedSteps

        hook = PairedSteps(torch, args.paired, args)
    clock = StepClock(args)

    class Timed(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, i):
            clock.step_done()
            if hook is not None and hook.step_end():
                trainer.should_stop = True

    torch.manual_seed(0)
    n = args.batch * 64
    data = torch.utils.data.TensorDataset(torch.randn(n, args.d), torch.randint(0, 10, (n,)))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                                         pin_memory=args.device.startswith("cuda"),
                                         persistent_workers=args.workers > 0)
    trainer = L.Trainer(max_steps=args.steps if not args.paired else 10**6, max_epochs=-1,
                        accelerator="gpu" if args.device.startswith("cuda") else "cpu", devices=1,
                        precision="bf16-mixed" if args.bf16 else "32-true",
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0, callbacks=[Timed()])
    trainer.fit(MLP(), loader)
    clock.finish()
    if hook is not None:
        hook.finish()


if __name__ == "__main__":
    main()
