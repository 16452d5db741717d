"""Figures computed a second, independent way: plain Python over the raw JSON events.

Nothing here imports gpucheckup: each figure is recomputed from its written definition
(docs/metrics.md) with a sorted-merge interval union, so that a test comparing the two
catches a bug in either.
"""

from __future__ import annotations

import statistics

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def step_windows(doc: dict) -> list[tuple[float, float]]:
    """ProfilerStep windows: [previous step end, max(host end, end of GPU work launched in the step)]."""
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ends = []
    for hs, he in steps:
        gpu_end = [e["ts"] + e["dur"] for e in ev if e.get("cat") in GPU_CATS
                   and hs <= launch_ts.get(e["args"].get("correlation"), -1) <= he]
        ends.append(max([he] + gpu_end))
    windows, prev = [], steps[0][0]
    for end in ends:
        end = max(end, prev)
        windows.append((prev, end))
        prev = end
    return windows


def busy_pct(doc: dict, windows: list[tuple[float, float]]) -> float:
    """Union of kernel/copy/memset time inside the windows over their total length (one device)."""
    lo, hi = windows[0][0], windows[-1][1]
    iv = [(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in doc["traceEvents"]
          if e.get("ph") == "X" and e.get("cat") in GPU_CATS and e["ts"] + e["dur"] > lo and e["ts"] < hi]
    return 100 * union_length(iv) / (hi - lo)


def kernel_durations(doc: dict, windows: list[tuple[float, float]]) -> list[float]:
    """Durations of kernels starting inside the analysis window."""
    lo, hi = windows[0][0], windows[-1][1]
    return [e["dur"] for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") == "kernel" and lo <= e["ts"] <= hi]


def small_kernel_pct(durs: list[float], threshold_us: float = 20.0) -> float:
    return 100 * sum(d < threshold_us for d in durs) / len(durs)


def dataloader_pct(doc: dict, windows: list[tuple[float, float]]) -> float:
    """DataLoader __next__ time clipped to the windows, over their total length."""
    lo, hi = windows[0][0], windows[-1][1]
    iv = [(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in doc["traceEvents"]
          if e.get("ph") == "X" and e.get("cat") == "user_annotation"
          and e["name"].startswith("enumerate(DataLoader)") and e["ts"] + e["dur"] > lo and e["ts"] < hi]
    return 100 * union_length(iv) / (hi - lo)


def kernel_share(doc: dict, windows, keywords: tuple[str, ...]) -> float:
    """Percent of kernel time in kernels whose name contains any keyword (case-insensitive)."""
    lo, hi = windows[0][0], windows[-1][1]
    ks = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel" and lo <= e["ts"] <= hi]
    total = sum(e["dur"] for e in ks)
    hit = sum(e["dur"] for e in ks if any(k in e["name"].lower() for k in keywords))
    return 100 * hit / total


def median_step_ms(windows) -> float:
    return statistics.median(b - a for a, b in windows) / 1000
