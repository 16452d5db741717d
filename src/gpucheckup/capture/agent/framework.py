"""Which training framework calls the optimizer's step, read once at the first step from the Python stack above
the agent's step hook: Lightning's Trainer (`lightning/pytorch/`, `pytorch_lightning/`), Hugging Face's Trainer
(`transformers/trainer.py`), accelerate (`accelerate/`), else a plain loop. Lightning and the HF Trainer come first:
the HF Trainer steps through accelerate's optimizer wrapper too. Written to agent.json as `framework`; the check-up
words its fixes in that framework's terms (diagnosis/framework_words.py). Standard library only."""

from __future__ import annotations

# (name, path fragments of the modules that drive the loop), first match wins
FRAMEWORKS = (
    ("lightning", ("/lightning/pytorch/", "/pytorch_lightning/")),
    ("hf_trainer", ("/transformers/trainer.py", "/transformers/trainer_")),
    ("accelerate", ("/accelerate/",)),
)
PLAIN = "plain"
MAX_FRAMES = 200  # a deeper stack is walked this far


def calling_framework(frame) -> str:
    """The framework whose modules are on the stack from `frame` outwards (PLAIN when none is)."""
    files = []
    while frame is not None and len(files) < MAX_FRAMES:
        files.append(frame.f_code.co_filename.replace("\\", "/"))
        frame = frame.f_back
    for name, marks in FRAMEWORKS:
        if any(m in f for f in files for m in marks):
            return name
    return PLAIN
