"""What bounds each kernel, by Nsight Compute's Speed-of-Light figures, joined to the trace's kernels.

Definitions (also in docs/mfu.md):
- SM % = sm__throughput.avg.pct_of_peak_sustained_elapsed (the busiest SM pipe or issue rate
  against its peak; address arithmetic and load/store issue count, not only FLOPs).
- memory % = the larger of dram__throughput and gpu__compute_memory_throughput (the busiest of
  L1, L2 and DRAM) pct_of_peak_sustained_elapsed, whichever the CSV holds.
- warps active % = sm__warps_active.avg.pct_of_peak_sustained_active (achieved occupancy).
- bound, from the larger of SM % and memory %:
  compute-bound: SM % >= 60 and SM % > memory %;
  memory-bound: memory % >= 60 and memory % >= SM %;
  latency-bound: both < 40 (neither unit is kept busy: too few warps, dependent instructions,
  a short grid or launch tail; warps active % says whether occupancy is the cause);
  balanced: the rest (the larger is 40-60%: both units moderately used, neither saturated).
- per kernel name: the duration-weighted mean of each % over its profiled launches (the plain
  mean when durations are missing); the bound is then classified from those means.
- join to the trace: ncu and the profiler demangle names differently (`<unnamed>` against
  `(anonymous namespace)`, `[lambda() (instance 1)]` against `{lambda()#1}`, `T1` against the
  concrete type, no `at::`). Both names are cut at their top-level parameter list and reduced to
  their identifier and number tokens (namespaces at/c10/native/std and `void`, `const`, `lambda`,
  `T1`... dropped, true/false as 1/0); the trace kernel with the same base name and the largest
  token overlap (Jaccard >= 0.5) is the match (the first such kernel on a tie).
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace.gpu.kernels import KernelStats, kernel_label
from gpucheckup.trace.ncu_csv import DRAM_PCT, DURATION, MEM_PCT, SM_PCT, WARPS_PCT, NcuLaunch

BOUND_PCT = 60.0
LATENCY_PCT = 40.0
MATCH_JACCARD = 0.5
THRESHOLDS = {
    "compute-bound": f"SM % >= {BOUND_PCT:g} and SM % > memory %",
    "memory-bound": f"memory % >= {BOUND_PCT:g} and memory % >= SM %",
    "latency-bound": f"SM % < {LATENCY_PCT:g} and memory % < {LATENCY_PCT:g}",
    "balanced": f"otherwise (the larger of SM % and memory % is {LATENCY_PCT:g}-{BOUND_PCT:g}%)",
}
_DROP = {"void", "const", "at", "c10", "native", "std", "lambda", "instance", "unnamed", "anonymous", "namespace",
         "operator", "volatile", "struct", "class", "__restrict__", "detail", "cuda"}
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")


def classify(sm: float | None, mem: float | None) -> str | None:
    """compute-, memory-, latency-bound or balanced from SM % and memory %; None without both."""
    if sm is None or mem is None:
        return None
    if sm >= BOUND_PCT and sm > mem:
        return "compute-bound"
    if mem >= BOUND_PCT and mem >= sm:
        return "memory-bound"
    if sm < LATENCY_PCT and mem < LATENCY_PCT:
        return "latency-bound"
    return "balanced"


def memory_pct(m: dict[str, float]) -> float | None:
    """The larger of DRAM % and memory (L1/L2/DRAM) % among those measured."""
    vals = [m[k] for k in (DRAM_PCT, MEM_PCT) if k in m]
    return max(vals) if vals else None


def strip_params(name: str) -> str:
    """A demangled name without its top-level parameter list (and `void ` prefix)."""
    depth = 0
    for i, ch in enumerate(name):
        if ch in "<[{":
            depth += 1
        elif ch in ">]}":
            depth = max(depth - 1, 0)
        elif ch == "(":
            if depth == 0 and i > 0 and not name[:i].rstrip().endswith(("operator", "lambda", "anonymous namespace")) \
                    and "(anonymous namespace" != name[i:i + 20]:
                return name[:i].removeprefix("void ").strip()
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
    return name.removeprefix("void ").strip()


def base_name(name: str) -> str:
    """The kernel's function name: last `::` component before its template arguments."""
    head = strip_params(name).replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    return re.split(r"<", head, maxsplit=1)[0].split("::")[-1].strip()


def tokens(name: str) -> frozenset[str]:
    """Identifier and number tokens of a name without its parameter list, noise words dropped."""
    out = set()
    for t in _TOKEN.findall(strip_params(name)):
        t = {"true": "1", "false": "0"}.get(t, t)
        if t in _DROP or re.fullmatch(r"T\d+", t):
            continue
        out.add(t)
    return frozenset(out)


def _weighted(launches: list[NcuLaunch], key) -> float | None:
    vals = [(key(x.metrics), x.metrics.get(DURATION)) for x in launches]
    vals = [(v, w) for v, w in vals if v is not None]
    if not vals:
        return None
    if all(w for _, w in vals):
        return float(sum(v * w for v, w in vals) / sum(w for _, w in vals))
    return float(np.mean([v for v, _ in vals]))


def match_names(ncu_names: list[str], kstats: KernelStats) -> dict[str, str | None]:
    """For each ncu kernel name, the trace kernel name it is (or None)."""
    trace = kstats.per_name
    by_base: dict[str, list[dict]] = {}
    for k in trace:
        by_base.setdefault(base_name(k["name"]), []).append(k)
    tok_cache = {k["name"]: tokens(k["name"]) for k in trace}
    out = {}
    for n in ncu_names:
        cands = by_base.get(base_name(n), [])
        tn = tokens(n)
        best, best_key = None, None
        for k in cands:
            tk = tok_cache[k["name"]]
            jac = len(tn & tk) / len(tn | tk) if tn | tk else 0.0
            if jac < MATCH_JACCARD:
                continue
            key = (jac,)
            if best_key is None or key > best_key:
                best, best_key = k["name"], key
        out[n] = best
    return out


class NcuBounds(msgspec.Struct):
    """The report's `ncu` block; kernels, top and per_launch are its table rows."""

    path: str
    thresholds: dict
    launches: int
    kernel_names: int
    matched_to_trace: int
    trace_ms_by_bound: dict[str, float]
    kernels: list[dict]
    top: list[dict]
    per_launch: list[dict]


def ncu_bounds(launches: list[NcuLaunch], kstats: KernelStats | None, path: str = "") -> NcuBounds:
    """The report's `ncu` block: per-launch and per-name figures and bounds, joined to the trace."""
    per_launch = []
    for x in launches:
        sm, mem = x.metrics.get(SM_PCT), memory_pct(x.metrics)
        per_launch.append({"id": x.id, "name": x.name, "sm_pct": sm, "dram_pct": x.metrics.get(DRAM_PCT),
                           "memory_pct": mem, "warps_active_pct": x.metrics.get(WARPS_PCT),
                           "duration_us": x.metrics[DURATION] / 1000 if DURATION in x.metrics else None,
                           "bound": classify(sm, mem)})
    groups: dict[str, list[NcuLaunch]] = {}
    for x in launches:
        groups.setdefault(x.name, []).append(x)
    matches = match_names(list(groups), kstats) if kstats is not None else {n: None for n in groups}
    trace_by_name = {k["name"]: k for k in kstats.per_name} if kstats is not None else {}
    kernels = []
    for name, ls in groups.items():
        sm = _weighted(ls, lambda m: m.get(SM_PCT))
        mem = _weighted(ls, memory_pct)
        dur = [x.metrics[DURATION] for x in ls if DURATION in x.metrics]
        tname = matches.get(name)
        tk = trace_by_name.get(tname) if tname else None
        kernels.append({
            "name": name,
            "label": kernel_label(name),
            "launches": len(ls),
            "sm_pct": sm,
            "dram_pct": _weighted(ls, lambda m: m.get(DRAM_PCT)),
            "memory_pct": mem,
            "warps_active_pct": _weighted(ls, lambda m: m.get(WARPS_PCT)),
            "duration_us_total": sum(dur) / 1000 if dur else None,
            "bound": classify(sm, mem),
            "trace_name": tname,
            "trace_pct": tk["pct"] if tk else None,
            "trace_ms": tk["total_ms"] if tk else None,
        })
    kernels.sort(key=lambda k: (-(k["trace_ms"] or 0), -(k["duration_us_total"] or 0)))
    top = []
    if kstats is not None:
        by_trace = {}
        for k in kernels:
            if k["trace_name"] and k["trace_name"] not in by_trace:
                by_trace[k["trace_name"]] = k
        for t in kstats.per_name[:10]:
            k = by_trace.get(t["name"])
            top.append({"name": t["name"], "label": kernel_label(t["name"]), "pct": t["pct"],
                        "total_ms": t["total_ms"], "bound": k["bound"] if k else None,
                        "sm_pct": k["sm_pct"] if k else None, "memory_pct": k["memory_pct"] if k else None,
                        "warps_active_pct": k["warps_active_pct"] if k else None})
    bound_ms: dict[str, float] = {}
    for k in kernels:
        if k["trace_ms"] is not None and k["bound"]:
            bound_ms[k["bound"]] = bound_ms.get(k["bound"], 0.0) + k["trace_ms"]
    matched = sum(1 for k in kernels if k["trace_name"])
    return NcuBounds(path=path, thresholds=THRESHOLDS, launches=len(launches), kernel_names=len(kernels),
                     matched_to_trace=matched, trace_ms_by_bound=bound_ms, kernels=kernels, top=top,
                     per_launch=per_launch)
