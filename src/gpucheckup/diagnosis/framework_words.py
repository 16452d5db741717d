"""Fixes in the words of the framework that runs the training loop (the agent reads it off the stack at the first
optimizer step: capture/agent/framework.py): Hugging Face's `TrainingArguments`, Lightning's `Trainer` and
`configure_optimizers`, accelerate's `Accelerator`. Each entry says where the same change is made in that
framework; a fix or framework missing here keeps the plain PyTorch `how`. `{workers}` is filled as in the plain
advice (diagnosis/fixes.py)."""

from __future__ import annotations

TITLES = {"hf_trainer": "HF Trainer", "lightning": "Lightning", "accelerate": "accelerate"}

WORDS: dict[str, dict[str, str]] = {
    "dataloader_workers": {
        "hf_trainer": "TrainingArguments(dataloader_num_workers={workers}, dataloader_persistent_workers=True)",
        "lightning": "DataLoader(..., num_workers={workers}, persistent_workers=True) in train_dataloader() or "
                     "your LightningDataModule",
        "accelerate": "DataLoader(..., num_workers={workers}, persistent_workers=True) before "
                      "accelerator.prepare(...)",
    },
    "more_workers": {
        "hf_trainer": "TrainingArguments(dataloader_num_workers=..., dataloader_prefetch_factor=...)",
        "lightning": "DataLoader(..., num_workers=..., prefetch_factor=...) in train_dataloader()",
    },
    "pin_memory": {
        "hf_trainer": "TrainingArguments(dataloader_pin_memory=True) (its default: check it was not turned off)",
        "lightning": "DataLoader(..., pin_memory=True) in train_dataloader(); Lightning moves the batch itself",
    },
    "fused_optimizer": {
        "hf_trainer": 'TrainingArguments(optim="adamw_torch_fused")',
        "lightning": "in configure_optimizers(): torch.optim.AdamW(self.parameters(), ..., fused=True)",
        "accelerate": "torch.optim.AdamW(model.parameters(), ..., fused=True) before accelerator.prepare(...)",
    },
    "torch_compile": {
        "hf_trainer": "TrainingArguments(torch_compile=True)",
        "lightning": "model = torch.compile(model) before trainer.fit(model)",
        "accelerate": 'Accelerator(dynamo_backend="inductor")',
    },
    "cuda_graph": {
        "hf_trainer": 'TrainingArguments(torch_compile=True, torch_compile_mode="reduce-overhead")',
        "lightning": 'model = torch.compile(model, mode="reduce-overhead") before trainer.fit(model)',
        "accelerate": 'Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="inductor", mode="reduce-overhead"))',
    },
    "no_host_reads": {
        "hf_trainer": "TrainingArguments(logging_nan_inf_filter=False) (Trainer reads each step's loss on the host "
                      "to filter NaN and Inf), and no .item() in your callbacks or compute_loss",
        "lightning": "no .item() in training_step; self.log(..., on_step=False) or Trainer(log_every_n_steps=N)",
        "accelerate": "no loss.item() each step: gather and log every N steps",
    },
    "tf32": {
        "hf_trainer": "TrainingArguments(tf32=True)",
        "lightning": 'torch.set_float32_matmul_precision("high") before trainer.fit(...)',
    },
    "bf16_autocast": {
        "hf_trainer": "TrainingArguments(bf16=True)",
        "lightning": 'Trainer(precision="bf16-mixed")',
        "accelerate": 'Accelerator(mixed_precision="bf16")',
    },
    "larger_batch": {
        "hf_trainer": "TrainingArguments(per_device_train_batch_size=larger, gradient_accumulation_steps=smaller)",
        "lightning": "DataLoader(batch_size=larger) with Trainer(accumulate_grad_batches=smaller)",
        "accelerate": "DataLoader(batch_size=larger) with Accelerator(gradient_accumulation_steps=smaller)",
    },
}


def framework_how(key: str, framework: str, fill: dict) -> str:
    """Where fix `key` is made in `framework`, titled ("HF Trainer: TrainingArguments(...)"), or "" when the
    table has no words for it."""
    words = WORDS.get(key, {}).get(framework)
    return f"{TITLES[framework]}: {words.format(**fill)}" if words else ""
