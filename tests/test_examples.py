"""The example pathologies run on a CPU at small sizes, baseline and with every fix flag that a CPU
can apply; `gpucheckup examples` lists each with its fix flags."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from gpucheckup.examples import NAMES, catalogue

pytest.importorskip("torch")

JOB = Path(__file__).parent / "jobs" / "profile_example.py"
STEPS = 3
FUSED, FOREACH = "aten::_fused_adamw_", "aten::_foreach_lerp_"  # AdamW's fused kernel; its tensor-list form
SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
WORKERS = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def items(p) -> int:
    return p["ops"].get("aten::item", 0)


# Each variant: flags, and what the profile must show for the flag to have taken effect, by hand from the example's
# code at --steps 3 on a CPU (the small sizes: sync 4 layers, moe 8 experts, comm 4 layers of weight and bias).
RUNS = {
    ("launch", ()): lambda p, base: FUSED not in p["ops"] and FOREACH not in p["ops"],  # AdamW's for-loop form
    ("launch", ("--fused",)): lambda p, base: p["ops"][FUSED] == STEPS and FOREACH not in p["ops"],
    ("launch", ("--foreach",)): lambda p, base: p["ops"][FOREACH] == STEPS and FUSED not in p["ops"],
    ("sync", ()): lambda p, base: True,
    # the example's own host reads: each step one per layer + the logged loss = 3 x 5; with --no-sync only at step 2:
    # the NaN flag and the loss = 2 (AdamW's own reads are the same in both)
    ("sync", ("--no-sync", "--log-every", "2")): lambda p, base: items(base) - items(p) == STEPS * (4 + 1) - 2,
    ("copies", ()): lambda p, base: True,
    # a CPU run has nothing to pin (the example says so); the flag is accepted and pins nothing
    ("copies", ("--pin-memory",)): lambda p, base: "aten::pin_memory" not in p["ops"] and p["ops"] == base["ops"],
    ("input", ()): lambda p, base: p["ops"][SINGLE] == STEPS and WORKERS not in p["ops"],
    ("input", ("--workers", "1", "--pin-memory")): lambda p, base: p["ops"][WORKERS] == STEPS
    and SINGLE not in p["ops"],
    # int(counts.max()): one host read a step; top-2 of 8 experts for 256 tokens
    ("moe", ()): lambda p, base: items(p) == STEPS and p["topk"] == [2, [256, 8]],
    # a fixed capacity: no host read; top-1 routing over 4 experts
    ("moe", ("--capacity", "1.5", "--topk", "1", "--experts", "4")): lambda p, base: items(p) == 0
    and p["topk"] == [1, [256, 4]],
    ("moe", ("--tf32",)): lambda p, base: p["tf32"] and not base["tf32"],
    # without DDP one blocking all-reduce per tensor per step (8 tensors); DDP buckets them (one bucket here)
    ("comm", ()): lambda p, base: p["ops"]["gloo:all_reduce"] == STEPS * 8,
    ("comm", ("--ddp",)): lambda p, base: p["ops"]["DistributedDataParallel.forward"] == STEPS
    and p["ops"]["gloo:all_reduce"] == STEPS,
}


@lru_cache(maxsize=None)
def profiled(name: str, flags: tuple) -> dict:
    """The example's run under the profiler, in its own process as a user runs it: torch.distributed's state does
    not carry from one example to the next, and a hang ends at the timeout instead of holding the suite."""
    res = subprocess.run([sys.executable, str(JOB), name, "--steps", str(STEPS), "--device", "cpu", *flags],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"{STEPS} steps" in res.stdout and "ms per step" in res.stdout
    return json.loads(res.stdout.split("PROFILE ", 1)[1])


@pytest.mark.parametrize("name,flags", list(RUNS), ids=lambda x: " ".join(x) if isinstance(x, tuple) else x)
def test_example_runs_on_cpu_and_each_flag_takes_effect(name, flags):
    p = profiled(name, flags)
    base = profiled(name, ()) if flags else p
    assert RUNS[(name, flags)](p, base), {k: v for k, v in p.items() if k != "ops"}


def test_fixes_that_need_a_gpu_say_so():
    mod = importlib.import_module("gpucheckup.examples.launch")
    with pytest.raises(SystemExit, match="--cuda-graphs needs a CUDA device"):
        mod.main(["--steps", "1", "--device", "cpu", "--cuda-graphs"])


def test_every_example_has_fix_flags_and_is_listed():
    listed = subprocess.run([sys.executable, "-m", "gpucheckup", "examples"], capture_output=True, text=True,
                            check=True).stdout
    for ex in catalogue.examples():
        fixes = [f for f, what in ex.flags if what.startswith(catalogue.FIX_PREFIX)]
        assert fixes, f"{ex.name} has no fix flag"
        assert f"python -m gpucheckup.examples.{ex.name}" in listed
        for f in fixes:
            assert f in listed
    assert [e.name for e in catalogue.examples()] == list(NAMES)
    moe = next(e for e in catalogue.examples() if e.name == "moe")
    assert {"--topk TOPK", "--experts EXPERTS"} <= {f for f, _ in moe.flags}
