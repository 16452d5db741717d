"""The fix catalogue: one entry per fix, every saving model stated and documented, and a fix offered
only where its precondition holds in the trace (checked against the trace's raw events, read with the
standard library)."""

from __future__ import annotations

import re

import pytest

from conftest import DEMO, REPO, raw_events
from gpucheckup.analysis.checkup import analyze
from gpucheckup.diagnosis import diagnose, fixes
from gpucheckup.diagnosis.findings import TIERS
from gpucheckup.trace import read_trace

DATA = REPO / "tests" / "data" / "h200"
CASES = {
    "moe_seed": DEMO / "moe_seed" / "trace.json.gz",
    "compute_bound": DEMO / "compute_bound" / "trace.json.gz",
    "item_checks": DATA / "item_checks" / "trace.json.gz",
    "sync_bound": DATA / "sync_bound" / "trace.json.gz",
    "bf16": next((DATA / "bf16_transformer_run" / "traces").glob("*.json.gz")),
}


@pytest.fixture(scope="module")
def checked() -> dict:
    out = {}
    for name, path in CASES.items():
        a = analyze(read_trace(path))
        out[name] = (a, diagnose(a), raw_events(path))
    return out


def _offered(d) -> dict[str, set[str]]:
    """finding id -> the fix keys it offers."""
    return {f.id: {x.key for x in f.fixes} for f in d.findings}


def _cpu_ops(doc: dict) -> set[str]:
    return {e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}


def test_catalogue_entries_are_complete_and_documented():
    doc = (REPO / "docs" / "metrics.md").read_text()
    for e in fixes.CATALOGUE:
        assert e.tier in TIERS
        assert e.when and e.saves, e.key
        assert f"`{e.key}`" in doc, f"docs/metrics.md's fix catalogue lacks {e.key}"
    assert len({e.key for e in fixes.CATALOGUE}) == len(fixes.CATALOGUE)
    assert len({e.action for e in fixes.CATALOGUE}) == len(fixes.CATALOGUE)


def test_moe_dispatch_only_with_moe_dispatch_ops(checked):
    """The data-movement finding fires on the MoE seed and on a dense transformer; only the MoE one has
    top-k routing, a token sort/count and indexed gathers/scatters, so only it gets the MoE advice."""
    seen = 0
    for name, (a, d, doc) in checked.items():
        ops = _cpu_ops(doc)
        moe = ("aten::topk" in ops and ops & {"aten::argsort", "aten::sort", "aten::bincount"}
               and ops & {"aten::index_add_", "aten::index_select", "aten::scatter_add_"})
        offered = _offered(d)
        if "data_movement" in offered:
            seen += 1
            assert ("moe_dispatch" in offered["data_movement"]) == bool(moe), name
        assert not any("moe_dispatch" in keys for keys in offered.values()) or moe, name
    assert seen >= 3  # moe_seed, bf16 transformer, item_checks: the rule fires with and without MoE ops
    assert "moe_dispatch" in _offered(checked["moe_seed"][1])["data_movement"]
    assert "moe_dispatch" not in _offered(checked["bf16"][1])["data_movement"]


def _sync_ops(doc: dict) -> set[str]:
    """CPU ops that enclose a synchronizing CUDA call (cudaStreamSynchronize, cudaDeviceSynchronize,
    cudaMemcpy without Async) on the same thread, from the raw events."""
    ev = doc["traceEvents"]
    syncs = [e for e in ev if e.get("cat") == "cuda_runtime"
             and re.search(r"Synchronize|^cudaMemcpy$", e.get("name", ""))]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    out = set()
    for s in syncs:
        for o in ops:
            if o["tid"] == s["tid"] and o["ts"] <= s["ts"] and s["ts"] + s.get("dur", 0) <= o["ts"] + o["dur"]:
                out.add(o["name"])
    return out


def test_data_dependent_shapes_only_when_a_sync_comes_from_one(checked):
    """The sync finding fires on moe_seed (a bincount sync), item_checks and sync_bound (.item() and
    copies); only the first has a sync inside a data-dependent-shape op."""
    fired = 0
    for name, (a, d, doc) in checked.items():
        offered = _offered(d)
        if "synchronizations" not in offered:
            continue
        fired += 1
        dependent = bool(_sync_ops(doc) & fixes.DATA_DEPENDENT_OPS)
        assert ("static_shapes" in offered["synchronizations"]) == dependent, name
    assert fired >= 3
    assert "static_shapes" in _offered(checked["moe_seed"][1])["synchronizations"]
    assert "static_shapes" not in _offered(checked["item_checks"][1])["synchronizations"]
    assert "no_host_reads" in _offered(checked["item_checks"][1])["synchronizations"]


def test_a_fix_offered_by_two_findings_is_one_fix_with_one_saving(checked):
    a, d, doc = checked["sync_bound"]
    pins = [x for f in d.findings for x in f.fixes if x.key == "pin_memory"]
    assert len(pins) >= 2  # offered by synchronizations, exposed_copies and pageable_copies
    costs = {f.id: f.cost_ms_per_step for f in d.findings}
    model = _pinned_saving_from_raw(a, doc)  # the saving model's figure, from the raw events
    for f in d.findings:
        for x in f.fixes:
            if x.key == "pin_memory":
                assert x.saving_ms == pytest.approx(min(model, costs[f.id]))
    ranked = [fx.key for fx, _ in d.ranked_fixes()]
    assert ranked.count("pin_memory") == 1


def _pinned_saving_from_raw(a, doc) -> float:
    """The pageable copies' time less their bytes at 25 GB/s (docs/metrics.md), per step, from the raw events."""
    lo, hi = a.steps.window
    cp = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]
          and lo <= e["ts"] <= hi]
    mb = sum(e["args"]["bytes"] for e in cp) / 1e6
    ms = sum(e["dur"] for e in cp) / 1000
    share = a.window.traced_step_ms / (a.window.length_us / 1000)  # per step of the median basis
    return (ms - mb / 25.0) * share  # MB / (GB/s) = ms


def test_pinned_saving_from_bytes_and_time(checked):
    """pin_memory saves the pageable copies' time minus their bytes at PINNED_GB_S, from the raw events."""
    a, _, doc = checked["sync_bound"]
    assert fixes.BY_KEY["pin_memory"].saving(a) == pytest.approx(_pinned_saving_from_raw(a, doc), rel=1e-6)


def test_make_builds_a_catalogue_fix_for_other_rules():
    f = fixes.make("nccl_check", 3.5)
    assert f.key == "nccl_check" and f.tier == "config" and f.saving_ms == 3.5 and f.reason
