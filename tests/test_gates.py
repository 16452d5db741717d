"""Gates on a figure the check-up does not have: `--fail-if` and `compare --fail-if-slower` fail (exit 3, one line
naming the figure) unless `--allow-missing`; a gate that cannot be tested has not passed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
CPU_TRACE = DATA / "cpu_shapes" / "mats.json.gz"  # CPU torch matmuls: no kernel, so no GPU busy figure


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpucheckup", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_fail_if_on_a_figure_with_no_gpu_data_exits_3_naming_it():
    p = cli("analyze", CPU_TRACE, "--quiet", "--fail-if", "busy_pct<80")
    assert p.returncode == 3, p.stderr
    (line,) = [x for x in p.stderr.splitlines() if "busy_pct" in x]
    assert "failed:" in line and "not measured" in line
    p = cli("analyze", CPU_TRACE, "--quiet", "--fail-if", "busy_pct<80", "--allow-missing")
    assert p.returncode == 0, p.stderr
    assert "busy_pct" in p.stderr and "--allow-missing" in p.stderr  # passing it is said, not silent


def test_a_measured_figure_still_decides_beside_a_missing_one():
    # the CPU-side check-up measures the DataLoader share; it is >= 0, so '< 0' cannot fire: exit 0 with it alone
    assert cli("analyze", CPU_TRACE, "--quiet", "--fail-if", "dataloader_pct<0").returncode == 0
    p = cli("analyze", CPU_TRACE, "--quiet", "--fail-if", "dataloader_pct<0", "--fail-if", "mfu_pct<30")
    assert p.returncode == 3 and "mfu_pct" in p.stderr and "dataloader_pct" not in p.stderr


def test_compare_gate_exit_code_is_analyzes_and_a_missing_step_fails_it():
    # this CPU trace has no ProfilerStep and no GPU window, so neither side has a step time to compare
    p = cli("compare", CPU_TRACE, CPU_TRACE, "--fail-if-slower", "10")
    assert p.returncode == 3, p.stderr  # the same code as analyze's gates (README: exit codes)
    assert "step time" in p.stderr and "failed" in p.stderr
    assert cli("compare", CPU_TRACE, CPU_TRACE, "--fail-if-slower", "10", "--allow-missing").returncode == 0
    assert "exit 3" in cli("compare", "--help").stdout  # the help says the code it uses (it said 1)
