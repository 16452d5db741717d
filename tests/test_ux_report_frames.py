""""Which line of my code" (issue 12): with Python stacks in the trace, the findings name the user's own
frame (file(line): function), skipping torch internals; checked against the raw JSON."""

from __future__ import annotations

import re

import pytest

from conftest import raw_events, trace_path
from gpucheckup.checkup.pipeline import check_path


@pytest.fixture(scope="module")
def stacks():
    path = trace_path("launch_bound_stacks")
    return path, check_path(path)[0].report


def _evidence(r: dict, fid: str) -> str:
    return " ".join(next(f for f in r["verdict"]["findings"] if f["id"] == fid)["evidence"])


def test_launches_named_by_the_users_line(stacks):
    path, r = stacks
    text = _evidence(r, "launch_overhead")
    m = re.search(r"kernel launches by line of your code: (\S+\(\d+\): \w+) \((\d+)%\)", text)
    assert m, text
    frame, pct = m.group(1), int(m.group(2))
    assert "torch/" not in frame and "site-packages" not in frame
    # Independently: kernel launch calls of the profiled steps inside that Python frame on the same thread.
    ev = raw_events(path)["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    launches = [e for e in ev if e.get("cat") == "cuda_runtime" and "LaunchKernel" in e["name"]
                and lo <= e["ts"] <= hi]
    frames = [e for e in ev if e.get("cat") == "python_function" and e["name"] == frame]
    inside = sum(1 for x in launches if any(f["tid"] == x["tid"] and f["ts"] <= x["ts"]
                                            and x["ts"] + x["dur"] <= f["ts"] + f["dur"] for f in frames))
    assert inside > 0
    assert abs(pct - 100 * inside / len(launches)) <= 3


def test_sync_and_fp32_gemms_name_the_users_line(stacks):
    _, r = stacks
    assert re.search(r"cudaDeviceSynchronize at \S+\.py\(\d+\)", _evidence(r, "synchronizations"))
    assert re.search(r"FP32 GEMM launches by line of your code: \S+\.py\(\d+\)", _evidence(r, "fp32_gemms"))


def test_no_stacks_no_claim():
    r = check_path(trace_path("launch_bound"))[0].report
    assert not any("line of your code" in e for f in r["verdict"]["findings"] for e in f["evidence"])


def test_the_idle_time_named_by_the_users_line(stacks):
    _, r = stacks
    text = _evidence(r, "launch_overhead")
    m = re.search(r"the idle time by line of your code: (.*?)(?:;|$)", text)
    assert m, text
    shares = [int(x) for x in re.findall(r"\((\d+)%\)", m.group(1))]
    frames = re.findall(r"(\S+\.py\(\d+\): \w+) \(", m.group(1))
    assert frames and all("torch/" not in f for f in frames)
    assert 0 < sum(shares) <= 101 and shares == sorted(shares, reverse=True)


def test_gpu_bound_kernel_time_by_the_users_line(tmp_path):
    """A small synthetic GPU-bound trace with stacks (no real GPU-bound trace here has them): kernel time is
    split by the user frame its launches ran under; frames inside torch are skipped."""
    from conftest import write_trace

    def ev(cat, name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000),
              ev("python_function", "train.py(10): forward", 0, 200),
              ev("python_function", "torch/nn/modules/linear.py(125): forward", 1, 150),
              ev("python_function", "train.py(20): loss_fn", 300, 100)]
    for corr, (t_launch, t_kernel, dur) in enumerate(((5, 5, 600), (10, 605, 100), (310, 705, 290)), 1):
        events += [ev("cuda_runtime", "cudaLaunchKernel", t_launch, 2, correlation=corr),
                   {"ph": "X", "cat": "kernel", "name": "sm90_gemm_bf16", "pid": 0, "tid": 7, "ts": t_kernel,
                    "dur": dur, "args": {"device": 0, "stream": 7, "correlation": corr}}]
    path = write_trace(tmp_path / "stacks.json", events, with_stack=1)
    r = check_path(path)[0].report
    assert r["trace"]["with_stack"] and r["verdict"]["primary"] == "gpu_bound"
    text = _evidence(r, "gpu_bound")
    assert "kernel time by line of your code: train.py(10): forward (71%), train.py(20): loss_fn (29%)" in text
