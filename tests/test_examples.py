"""The example pathologies run on a CPU at small sizes, baseline and with every fix flag that a CPU
can apply; `gpucheckup examples` lists each with its fix flags."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from gpucheckup.examples import NAMES, catalogue

pytest.importorskip("torch")

RUNS = [
    ("launch", []), ("launch", ["--fused"]), ("launch", ["--foreach"]),
    ("sync", []), ("sync", ["--no-sync", "--log-every", "2"]),
    ("copies", []), ("copies", ["--pin-memory"]),
    ("input", []), ("input", ["--workers", "1", "--pin-memory"]),
    ("moe", []), ("moe", ["--capacity", "1.5", "--topk", "1", "--experts", "4"]), ("moe", ["--tf32"]),
    ("comm", []), ("comm", ["--ddp"]),
]


@pytest.mark.parametrize("name,flags", RUNS, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_example_runs_on_cpu(name, flags):
    # Each in its own process, as a user runs it: torch.distributed's state does not carry from one
    # example to the next, and a hang ends at the timeout instead of holding the suite.
    res = subprocess.run([sys.executable, "-m", f"gpucheckup.examples.{name}", "--steps", "3", "--device", "cpu"]
                         + flags, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "3 steps" in res.stdout and "ms per step" in res.stdout


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
