"""What a new user reads (issue 12): the terminal report at 80 columns in a pipe, --brief, the profiler's
caveat on host-side verdicts, the fix count. Each test runs the real command on a real H200 trace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, trace_path, read_report

H200 = REPO / "tests" / "data" / "h200"


def cli(*args, columns: int = 80) -> subprocess.CompletedProcess:
    """The command in a pipe (not a terminal) with COLUMNS set, as a CI log sees it."""
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("FORCE_COLOR", None)
    res = subprocess.run([sys.executable, "-m", "gpucheckup", *args], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return res


def flat(text: str) -> str:
    """Text with every run of whitespace and panel border (wrapped lines) as one space."""
    return re.sub(r"[\s│]+", " ", text)


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    """launch_bound_stacks at 80 columns, and its JSON."""
    out = tmp_path_factory.mktemp("stacks") / "r.json"
    res = cli("analyze", str(trace_path("launch_bound_stacks")), "--json", str(out))
    return res.stdout, read_report(out)


def test_80_columns_cut_no_figure_or_fix_code(stacks):
    text, r = stacks
    lines = text.splitlines()
    assert max(len(x) for x in lines) <= 80
    assert not re.search(r"\d…|\(\d+\.$", text, re.M), "a number cut at the edge"
    whole = flat(text)
    for f in r["verdict"]["findings"]:  # every finding's cost, whole (an informational one has no cost headline)
        if f["severity"] == "info" or (f["cost_ms_per_step"] == 0 and f["cost_pct_of_step"] == 0):
            continue
        cost = f"{f['cost_ms_per_step']:.2f} ms/step ({f['cost_pct_of_step']:.1f}%)"
        assert cost in whole, cost
    assert 'torch.compile(model, mode="reduce-overhead")' in whole  # fix code whole, not cut with …
    for fx in r["fixes"][:6]:
        assert flat(fx["action"]) in whole, fx["action"]


def test_80_columns_keep_the_top_kernels_share(stacks):
    text, r = stacks
    top = text[text.index("Top kernels"):]
    header = next(x for x in top.splitlines() if "kernel" in x and "count" in x)
    assert "share" in header
    for k in r["kernels"]["top"][:5]:
        assert re.search(rf"{k['total_ms']:.2f}\s+{k['pct']:.1f}%", top), k["label"]


def test_80_columns_op_names_not_wrapped_into_narrow_columns(stacks):
    text, r = stacks
    roof = text[text.index("against the roofline"):]
    for o in r["roofline"]["ops"][:5]:
        op = o["op"].removeprefix("aten::")
        first_shape = "x".join(map(str, o["shapes"][0]))
        assert re.search(rf"^\s*{op} {first_shape}", roof, re.M), (op, first_shape)


def test_more_fixes_are_counted(stacks):
    text, r = stacks
    assert len(r["fixes"]) > 6
    assert f"{len(r['fixes']) - 6} more fixes: see --json or --html" in text


@pytest.mark.parametrize("case, verdict", [("input_bound", "INPUT-BOUND"), ("launch_bound_stacks", "LAUNCH-BOUND"),
                                           ("compute_bound", "GPU-BOUND")])
def test_brief_fits_15_lines_with_verdict_findings_fixes(case, verdict, tmp_path):
    out = tmp_path / "r.json"
    res = cli("analyze", str(trace_path(case)), "--brief", "--json", str(out))
    r = read_report(out)
    lines = res.stdout[:res.stdout.index("JSON written")].rstrip("\n").splitlines()
    assert len(lines) <= 15, res.stdout
    assert max(len(x) for x in lines) <= 80
    whole = flat(res.stdout)
    assert verdict in whole
    big = sorted(r["verdict"]["findings"], key=lambda f: -(f["cost_ms_per_step"] or 0))[:3]
    for f in big:
        assert f["title"] in whole
    assert "What to try first" in whole and "1. " in whole and flat(r["fixes"][0]["action"]) in whole
    assert "Key figures" not in whole  # the long report's sections are left out


@pytest.fixture(scope="module")
def bf16_run():
    return H200 / "bf16_transformer_run"


def test_launch_bound_under_the_profiler_warns_of_its_cost(bf16_run):
    res = cli("analyze", str(bf16_run))
    box = res.stdout[:res.stdout.index("╰")]
    assert "LAUNCH-BOUND" in box
    assert "torch.profiler adds host cost to every op" in flat(box)
    assert "--unprofiled-step-ms" in flat(box) and "gpucheckup run" in flat(box)


def test_with_the_unprofiled_step_the_caveat_goes(bf16_run):
    """The step time measured without the profiler (meta.json, on the H200) gives the true verdict."""
    ms = json.loads((bf16_run / "meta.json").read_text())["step_s_unprofiled"] * 1000
    res = cli("analyze", str(bf16_run), "--unprofiled-step-ms", f"{ms:.3f}")
    assert "GPU-BOUND" in res.stdout
    assert "torch.profiler adds host cost" not in flat(res.stdout)


def test_gpu_bound_verdict_has_no_profiler_caveat():
    res = cli("analyze", str(trace_path("compute_bound")))
    assert "GPU-BOUND" in res.stdout and "torch.profiler adds host cost" not in flat(res.stdout)


def test_rare_syncs_are_counted_not_rounded_to_zero(stacks):
    """One synchronization in 30 steps: never "0.0 synchronizations per step" beside its cost."""
    text, r = stacks
    n, steps = r["sync"]["count"], r["steps"]["count"]
    assert 0 < n < steps  # the trace's own counts (a sync costs, but fewer than one a step)
    whole = flat(text)
    assert "0.0 synchronizations" not in whole and "0.0 syncs" not in whole and "0.0 per step" not in whole
    assert f"synchronizations: {n} in {steps} steps" in whole
    assert f"syncs {n} in {steps} steps" in whole


def test_no_step_markers_say_whole_trace_where_the_step_is_printed(tmp_path):
    out = tmp_path / "r.json"
    res = cli("analyze", str(H200 / "no_step_markers"), "--json", str(out), columns=200)
    r = read_report(out)
    assert r["steps"]["marked"] is False
    lines = res.stdout.splitlines()
    for i, line in enumerate(lines):
        if "note:" in line:
            continue
        if re.search(r"\bstep \d+\.\d\d ms|^\s*step time|FLOPs (per|of)", line) and "ms/step" not in line:
            assert re.search(r"whole trace", line), line
    assert "step time (median / min / max)" not in res.stdout
    assert not re.search(r"FLOPs per step", res.stdout)
