"""HTA's public test traces: every one gives a check-up, or one line naming what is missing (issue 12, item 8).

A trace with device work (kernels, copies, memsets, MTIA's command-processor events) gets the GPU check-up;
one with CPU operators only gets the CPU-side check-up (analysis/one_trace/host/cpu_profile.py); never "CPU-only" for a
trace with CPU operators. The whole set when a copy of HTA's tests/data is at $GPUCHECKUP_HTA_TRACES or
/work/coord/hta_traces, else the subset in tests/data/hta. Expected figures come from the raw JSON.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, raw_events

from gpucheckup import api
from gpucheckup.errors import CheckupError
from gpucheckup.checkup.pipeline import check

SUBSET = REPO / "tests" / "data" / "hta"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset", "mtia_ccp_events"}


def hta_dir() -> Path:
    for cand in (os.environ.get("GPUCHECKUP_HTA_TRACES"), "/work/coord/hta_traces"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return SUBSET


TRACES = sorted(p for p in hta_dir().rglob("*.json*") if p.is_file())


def raw(path: Path) -> list[dict] | None:
    """The trace's events as the standard library reads them; None when it is not a readable trace."""
    try:
        doc = raw_events(path)
    except Exception:  # noqa: BLE001 - empty, not gzip, not JSON: the check-up must say so in one line
        return None
    return doc.get("traceEvents") if isinstance(doc, dict) else None


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(hta_dir())))
def test_every_trace_gets_a_checkup_or_one_line_naming_what_is_missing(path):
    events = raw(path)
    cats = {e.get("cat") for e in events or () if e.get("ph") == "X"}
    try:
        up = api.analyze(path)
    except CheckupError as e:
        msg = str(e)
        assert "\n" not in msg and "CPU-only" not in msg
        assert not (cats & DEVICE_CATS) and "cpu_op" not in cats, f"refused a trace with work in it: {msg}"
        return
    if cats & DEVICE_CATS:
        assert up.verdict not in ("cpu_only", "no_timeline"), up.reason
    else:
        assert "cpu_op" in cats and up.verdict == "cpu_only"
        assert up.report["cpu"]["ops_count"] == sum(1 for e in events if e.get("ph") == "X"
                                                    and e.get("cat") == "cpu_op")


def test_mtia_device_work_is_read_as_kernels():
    path = SUBSET / "mtia_inference_rank_0_cut.json.gz"
    ccp = [e for e in raw_events(path)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events"]
    up = api.analyze(path)
    assert up.verdict != "cpu_only"
    assert up.report["kernels"]["count"] == len(ccp)


def test_cpu_side_figures_match_the_raw_trace():
    """rank-34: four aten::empty calls inside one ProfilerStep; the step's length is the annotation's."""
    path = SUBSET / "cpu_only_rank-34.json.gz"
    ev = raw_events(path)["traceEvents"]
    step = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    up = check(path).cpu[0]
    p = up.profile
    assert p.ops_count == len(ops) and p.steps == len(step)
    assert p.step_median_ms == pytest.approx(float(np.median([e["dur"] for e in step])) / 1e3)
    assert p.top_ops[0].name == "aten::empty" and p.top_ops[0].count == sum(e["name"] == "aten::empty" for e in ops)
    assert p.python_between_pct == pytest.approx(100 - p.main_thread.busy_pct)


def test_self_time_excludes_nested_operators():
    """cupti_profiler: an operator's self time is its duration less its direct children's (from the raw JSON)."""
    path = SUBSET / "cupti_profiler.json.gz"
    ops = [e for e in raw_events(path)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    by_thread: dict = {}
    for e in ops:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    self_by_name: dict[str, float] = {}
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        for i, e in enumerate(evs):
            end = e["ts"] + e["dur"]
            inner = [c for c in evs[i + 1:] if c["ts"] >= e["ts"] and c["ts"] + c["dur"] <= end]
            direct = [c for c in inner if not any(o is not c and o["ts"] <= c["ts"] and
                                                  c["ts"] + c["dur"] <= o["ts"] + o["dur"] for o in inner)]
            self_by_name[e["name"]] = self_by_name.get(e["name"], 0.0) + e["dur"] - sum(c["dur"] for c in direct)
    best = max(self_by_name, key=self_by_name.get)
    top = check(path).cpu[0].profile.top_ops[0]
    assert top.name == best
    assert top.self_ms == pytest.approx(self_by_name[best] / 1e3, rel=1e-6)
