"""Launch-bound HF Trainer job: a tiny GPT-2 built from its config, synthetic token ids, transformers' Trainer.

Nothing is downloaded: the model comes from GPT2Config (4 layers, width 256, 4 heads, 128 positions, a vocabulary of
2048), the data are random token ids with the ids as labels, the loop is Trainer's own (AdamW, no logging, no
checkpoints). At batch 8 its few hundred small kernels per step leave the GPU mostly idle: launch-bound.
`--paired OUT.json` runs the light window's paired phases in the loop instead (validation/paired_steps.py).
Each step's end is timed by a TrainerCallback (validation/common.py's StepClock), so `--report` works as in the other
jobs. Usage: python3 train_hf_trainer.py [--steps 200] [--report R.json] [--paired OUT.json]
"""

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import StepClock, parse  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    """Random token ids, labels = inputs (the causal LM shifts them)."""

    def __init__(self, n: int, seq: int, vocab: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    args = parse(__doc__.splitlines()[0], batch=8, steps=200, warmup=20, seq=128, layers=4, width=256, vocab=2048,
                 paired="", nan_filter=1)
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=4, n_positions=args.seq, vocab_size=args.vocab,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    hook = None
    if args.paired:
        from paired_steps import PairedSteps

        hook = PairedSteps(torch, args.paired, args)
    clock = StepClock(args)

    class Timed(TrainerCallback):
        def on_step_end(self, targs, state, control, **kw):
            clock.step_done()
            if hook is not None and hook.step_end():
                control.should_training_stop = True

    extra = {"bf16": True} if args.bf16 else {}
    if args.compile:
        extra.update(torch_compile=True, torch_compile_mode=args.compile)
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(
            output_dir=out, max_steps=args.steps if not args.paired else 10**6,
            per_device_train_batch_size=args.batch, learning_rate=1e-4, logging_strategy="no",
            save_strategy="no", report_to="none", dataloader_num_workers=args.workers,
            logging_nan_inf_filter=bool(args.nan_filter), dataloader_persistent_workers=args.workers > 0, disable_tqdm=True,
            use_cpu=not args.device.startswith("cuda"), seed=0, **extra)
        data = Tokens(max(args.batch * (args.steps + 5), 64) if not args.paired else 4096, args.seq, args.vocab)
        Trainer(model=model, args=targs, train_dataset=data, callbacks=[Timed()]).train()
    clock.finish()
    if hook is not None:
        hook.finish()


if __name__ == "__main__":
    main()
