"""The training loop's framework, read by the agent off the stack at the first optimizer step, and the fixes worded
in that framework's terms. The frameworks' own packages are not installed here: each job calls the optimizer's step
from a module at the path the framework's own loop lives at (`transformers/trainer.py`,
`lightning/pytorch/loops/...`), which is what the agent reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from gpucheckup.analysis.flops.mfu import MfuInputs
from gpucheckup.checkup import pipeline
from gpucheckup.trace.reader import read_trace

LOOP = '''import torch

def train(steps):
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        model(torch.randn(4, 8)).square().mean().backward()
        opt.step()
        opt.zero_grad()
'''


def _agent_framework(tmp_path: Path, module: str | None) -> str:
    """Run a 4-step CPU job under `gpucheckup run` whose optimizer steps are called from `module` (a dotted path
    under a site folder of its own; None: from the job's own script) and return agent.json's `framework`."""
    pytest.importorskip("torch")
    site = tmp_path / "site"
    if module:
        path = site.joinpath(*module.split("."))
        for parent in [site.joinpath(*module.split(".")[:i]) for i in range(1, module.count(".") + 1)]:
            parent.mkdir(parents=True, exist_ok=True)
            (parent / "__init__.py").touch()
        path.with_suffix(".py").write_text(LOOP)
        job = f"import sys; sys.path.insert(0, {str(site)!r}); import {module} as m; m.train(4)"
    else:
        job = LOOP + "\ntrain(4)\n"
    script = tmp_path / "job.py"
    script.write_text(job)
    out = tmp_path / "runs"
    p = subprocess.run([sys.executable, "-m", "gpucheckup", "run", "--out", str(out), "--no-report", "--skip", "2",
                        "--steps", "1", "--", sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    (agent,) = next(out.iterdir()).glob("agent*.json")
    return json.loads(agent.read_text())["framework"]


@pytest.mark.parametrize("module,framework", [("transformers.trainer", "hf_trainer"),
                                              ("lightning.pytorch.loops.fit_loop", "lightning"),
                                              ("accelerate.launch_loop", "accelerate"), (None, "plain")])
def test_the_agent_names_the_framework_that_calls_the_step(tmp_path, module, framework):
    assert _agent_framework(tmp_path, module) == framework


def test_fixes_are_worded_in_the_loops_framework():
    # the Lightning job on the H200 (tests/data/h200/README.md): its fixes as the agent's word "lightning" asks
    trace = read_trace(REPO / "tests" / "data" / "h200" / "lightning_closure" / "traces" / "trace.json.gz")
    hows = {}
    for framework in ("lightning", "hf_trainer", ""):
        c = pipeline.check_trace(trace, MfuInputs(unprofiled_step_ms=9.18, framework=framework))
        hows[framework] = {f["key"]: f["how"] for f in c.report["fixes"]}
    assert hows["lightning"]["fused_optimizer"].startswith("Lightning: in configure_optimizers(): torch.optim.AdamW(")
    assert hows["hf_trainer"]["fused_optimizer"] == 'HF Trainer: TrainingArguments(optim="adamw_torch_fused")'
    assert hows["hf_trainer"]["dataloader_workers"].startswith("HF Trainer: TrainingArguments(dataloader_num_workers=")
    assert hows[""]["fused_optimizer"] == ""  # a plain loop: the action already says it in PyTorch's words
