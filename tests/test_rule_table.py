"""docs/metrics.md's rule tables against the rules' own definitions: the same ids, and every threshold
the table states (by constant name and value) is the constant the rule uses; every constant a rule's
docstring names is in its row; rule texts print thresholds from their constants, not retyped."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from gpucheckup.analysis.one_trace.host import api_health
from gpucheckup.analysis.one_trace.gpu import kernels
from gpucheckup.analysis.one_trace import profiler_overhead
from gpucheckup.analysis.run_logs import step_history, telemetry
from gpucheckup.diagnosis import fixes, rules, run_rules, verdict

DOC = (REPO / "docs" / "metrics.md").read_text()
TRACE_MODULES = (rules, fixes, verdict, profiler_overhead, api_health, kernels)
RUN_MODULES = (run_rules, telemetry, step_history)


def _table(heading: str) -> dict[str, str]:
    """Rows of the first table under a heading: id -> the whole row."""
    part = DOC[DOC.index(heading):]
    rows = {}
    for line in part.splitlines()[1:]:
        if line.startswith("#"):
            break
        m = re.match(r"\| `(\w+)` \|", line)
        if m:
            rows[m.group(1)] = line
    return rows


def _value(name: str, modules) -> float:
    for m in modules:
        if hasattr(m, name):
            return float(getattr(m, name))
    raise AssertionError(f"{name} is defined in none of {[m.__name__ for m in modules]}")


def _rule_ids(funcs) -> dict[str, object]:
    return {("gpu_bound" if f is rules.gpu_bound_finding else f.__name__): f for f in funcs}


@pytest.mark.parametrize("heading, funcs, modules", [
    ("## Findings (`diagnosis/rules.py`)", [*rules.RULES, rules.gpu_bound_finding], TRACE_MODULES),
    ("### Run-level rules (`diagnosis/run_rules.py`)", run_rules.RUN_RULES, RUN_MODULES),
])
def test_rule_table_matches_the_rules(heading, funcs, modules):
    rows = _table(heading)
    ids = _rule_ids(funcs)
    assert set(rows) == set(ids)
    for rid, row in rows.items():
        stated = dict(re.findall(r"`([A-Z][A-Z0-9_]+)` = ([\d.]+)", row))
        for name, val in stated.items():
            assert _value(name, modules) == pytest.approx(float(val)), (rid, name)
        named = set(re.findall(r"\b([A-Z][A-Z0-9_]{2,})\b", ids[rid].__doc__ or ""))
        named = {n for n in named if any(hasattr(m, n) for m in modules)}
        assert named <= set(stated), (rid, named - set(stated))


def test_rule_texts_print_their_thresholds_from_the_constants(monkeypatch):
    """Change a threshold: the printed rule changes with it (no retyped literal)."""
    import gpucheckup.diagnosis.rules as r
    from conftest import DEMO
    from gpucheckup.analysis.checkup import analyze
    from gpucheckup.trace import read_trace

    a = analyze(read_trace(DEMO / "input_bound" / "trace.json.gz"))
    monkeypatch.setattr(r, "INPUT_PCT", 7.5)
    monkeypatch.setattr(r, "DATALOADER_PCT", 12.5)
    monkeypatch.setattr(r, "INPUT_CRITICAL_PCT", 21.5)
    f = r.input_pipeline(a)
    assert ">= 7.5%" in f.rule and ">= 12.5%" in f.rule and ">= 21.5%" in f.rule
    monkeypatch.setattr(r, "PAGEABLE_MB_PER_STEP", 2.5)
    assert "2.5 MB" in r.pageable_copies(a).rule
