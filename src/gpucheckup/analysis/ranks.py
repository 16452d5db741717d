"""Ranks side by side: clocks aligned, collectives matched, their time split into wait and transfer.

Definitions (also in docs/metrics.md):
- rank: the trace's `distributedInfo.rank`, else the number in its file name (rank1.json.gz).
- clock offset of rank r: the median over matched collective calls of (end on r - end on the
  lowest rank): a collective ends on every rank within microseconds, whatever its clock.
- a matched call: one key (analysis/collectives.py) present on every rank of its group.
- transfer of a matched call: the shortest duration across its ranks (the last rank to arrive
  waits for nobody: its duration is the data moving); a rank's wait: its duration minus the
  transfer (it arrived early and waited for the others). TraceLens splits them the same way.
- exposed wait: the part of a rank's wait (the first `wait` of its call) during which none of its
  own non-communication GPU ops ran: waiting that costs it time. A prefetched FSDP all-gather
  that waits behind compute waits without cost. On CPU traces every wait is exposed.
- arrival: a call's start on the aligned clock; the last rank to arrive at a call is late by its
  arrival minus the median arrival of the others, and causes the others' exposed wait there.
- per rank, per step, each the median over the profiled steps (robust to a long first step; the
  same step on ranks that run in lockstep): step_ms (step window), transfer_ms, wait_ms,
  exposed_wait_ms (sums over its calls in that step), compute_ms (GPU time of non-communication
  kernels, copies and memsets; on CPU traces: the step less transfer and wait), idle_ms (step
  less the union of every GPU op; 0 on CPU traces); late_ms: its lateness per step, the mean.
- straggler: the rank that causes at least STRAGGLER_SHARE of all exposed wait (the others'
  mean exposed wait at the calls it arrives last at), when that is at least STRAGGLER_STEP_PCT
  of the median step per step: the others wait for it.
- busbw per collective: bytes / transfer x nccl-tests' factor (hardware/links.py), the median
  over its calls; the job's busbw: the byte-weighted mean over every call.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.collectives import Calls, collective_calls
from gpucheckup.analysis.kernels import categorize
from gpucheckup.analysis.launches import launch_rows
from gpucheckup.analysis.steps import Steps, find_steps
from gpucheckup.hardware import links
from gpucheckup.trace.tables import KERNEL, Trace

STRAGGLER_SHARE = 0.6  # of all lateness, on one rank
STRAGGLER_STEP_PCT = 10.0  # exposed wait per step, % of the median step: the bar checkup.STRAGGLER_PCT sets for a slow rank
MIN_LATE_US = 50.0  # a call whose last rank is later than this counts towards lateness


@dataclass
class RankInput:
    """What the cross-rank analysis needs from one trace."""

    rank: int
    trace: Trace
    steps: Steps
    launch_rows: np.ndarray
    calls: Calls


def rank_input(trace: Trace, fallback_rank: int) -> RankInput:
    """Steps and collective calls of one rank's trace."""
    rows = launch_rows(trace)
    st = find_steps(trace, rows)
    rank = trace.rank if trace.rank is not None else fallback_rank
    return RankInput(rank, trace, st, rows, collective_calls(trace, st, rows))


@dataclass
class RankRow:
    """One rank's step and where it goes, per step in ms."""

    rank: int
    step_ms: float  # median step window
    compute_ms: float
    transfer_ms: float
    wait_ms: float
    exposed_wait_ms: float  # the part of wait_ms with no compute of its own beside it
    idle_ms: float
    late_ms: float  # how late it arrives per step, summed over the calls where it was last
    last_pct: float  # share of matched calls it arrived last at
    offset_us: float  # its clock offset against the lowest rank


@dataclass
class CollectiveRow:
    """One collective and message size over the matched calls, per rank and call."""

    name: str
    bytes: float
    count: int  # matched calls
    transfer_ms: float  # total over the calls, per step
    wait_ms: float  # mean over ranks, total over the calls, per step
    busbw_gb_s: float | None
    group_size: int


@dataclass
class RanksAnalysis:
    """The cross-rank figures of one job."""

    ranks: list[int]
    on_gpu: bool
    steps: int
    matched: int
    unmatched: int
    table: list[RankRow]
    collectives: list[CollectiveRow]
    busbw_gb_s: float | None
    straggler: int | None
    straggler_late_ms: float  # per step
    straggler_last_pct: float
    waited_ms: float  # the other ranks' mean wait per step
    notes: list[str] = field(default_factory=list)


def analyze_ranks(inputs: list[RankInput]) -> RanksAnalysis | None:
    """Match the ranks' collectives and split their time; None with fewer than 2 ranks holding calls."""
    inputs = sorted([r for r in inputs if len(r.calls)], key=lambda r: r.rank)
    if len(inputs) < 2:
        return None
    by_key: dict[tuple, dict[int, int]] = defaultdict(dict)
    for ri, r in enumerate(inputs):
        for ci, k in enumerate(r.calls.keys):
            by_key[k][ri] = ci
    matched = []
    for k, who in by_key.items():
        r0 = next(iter(who))
        n = r0_size = inputs[r0].calls.group_size[who[r0]]
        want = int(r0_size) if np.isfinite(n) else len(inputs)
        if len(who) >= 2 and len(who) == min(want, len(inputs)):
            matched.append((k, who))
    unmatched = len(by_key) - len(matched)
    offsets = _offsets(inputs, matched)
    n_steps = max(1, min(len(set(k[2] for k, _ in matched)), min(r.steps.count for r in inputs)))
    transfer = np.zeros(len(inputs))
    wait = np.zeros(len(inputs))
    exposed = np.zeros(len(inputs))
    caused = np.zeros(len(inputs))
    computing = [_compute_intervals(r) for r in inputs]
    per_step: list[dict] = [defaultdict(lambda: np.zeros(3)) for _ in inputs]  # step label -> transfer, wait, exposed
    late = np.zeros(len(inputs))
    last_count = np.zeros(len(inputs))
    per_coll: dict[tuple, list] = defaultdict(list)
    bytes_total = bytes_time = 0.0
    for k, who in matched:
        ris = np.array(list(who))
        cis = np.array([who[ri] for ri in ris])
        start = np.array([inputs[ri].calls.start[ci] - offsets[ri] for ri, ci in zip(ris, cis)])
        dur = np.array([inputs[ri].calls.end[ci] - inputs[ri].calls.start[ci] for ri, ci in zip(ris, cis)])
        tr = float(dur.min())
        transfer[ris] += tr
        wait[ris] += dur - tr
        for j, ri in enumerate(ris):
            per_step[ri][k[2]] += (tr, dur[j] - tr, 0.0)
        own_start = np.array([inputs[ri].calls.start[ci] for ri, ci in zip(ris, cis)])
        ex = np.array([(d - tr) - float(iv.covered_between(computing[ri], s0, s0 + d - tr))
                       for ri, s0, d in zip(ris, own_start, dur)])
        exposed[ris] += ex
        for j, ri in enumerate(ris):
            per_step[ri][k[2]][2] += ex[j]
        last = int(np.argmax(start))
        others = np.delete(start, last)
        lateness = float(start[last] - np.median(others))
        if lateness >= MIN_LATE_US:
            late[ris[last]] += lateness
            last_count[ris[last]] += 1
            caused[ris[last]] += float(np.delete(ex, last).mean())
        c0 = inputs[ris[0]].calls
        nbytes = float(c0.nbytes[cis[0]])
        size = int(c0.group_size[cis[0]]) if np.isfinite(c0.group_size[cis[0]]) else len(ris)
        per_coll[(k[1], nbytes, size)].append((tr, float((dur - tr).mean())))
        if nbytes > 0 and tr > 0:
            bytes_total += nbytes * links.bus_factor(k[1], size)
            bytes_time += tr
    steps_ms = np.array([float(np.median(r.steps.duration)) / 1e3 for r in inputs])
    table = []
    for ri, r in enumerate(inputs):
        tr, wt, ex = np.array([per_step[ri].get(lb, np.zeros(3)) for lb in r.steps.labels]).T / 1e3
        compute, idle = _gpu_per_step(r)
        if compute is None:  # CPU traces: the step less its collectives
            compute, idle = np.maximum(r.steps.duration / 1e3 - tr - wt, 0.0), np.zeros(len(tr))
        med = lambda x: float(np.median(x))  # noqa: E731
        table.append(RankRow(rank=r.rank, step_ms=steps_ms[ri], compute_ms=med(compute), transfer_ms=med(tr),
                             wait_ms=med(wt), exposed_wait_ms=med(ex), idle_ms=med(idle),
                             late_ms=late[ri] / 1e3 / n_steps,
                             last_pct=100 * last_count[ri] / max(len(matched), 1), offset_us=offsets[ri]))
    colls = []
    for (name, nbytes, size), vals in sorted(per_coll.items(), key=lambda kv: -sum(v[0] for v in kv[1])):
        trs = np.array([v[0] for v in vals])
        bws = [links.busbw_gb_s(name, nbytes, t / 1e3, size) for t in trs if t > 0]
        bws = [b for b in bws if b is not None]
        colls.append(CollectiveRow(name=name, bytes=nbytes, count=len(vals), transfer_ms=float(trs.sum()) / 1e3 / n_steps,
                                   wait_ms=float(sum(v[1] for v in vals)) / 1e3 / n_steps,
                                   busbw_gb_s=float(np.median(bws)) if bws else None, group_size=size))
    straggler, s_late, s_last, waited = None, 0.0, 0.0, 0.0
    total_caused = caused.sum()
    if total_caused > 0:
        top = int(np.argmax(caused))
        per_step = caused[top] / 1e3 / n_steps
        if caused[top] >= STRAGGLER_SHARE * total_caused and per_step >= STRAGGLER_STEP_PCT / 100 * float(np.median(steps_ms)):
            straggler, s_late = inputs[top].rank, late[top] / 1e3 / n_steps
            s_last = table[top].last_pct
            waited = float(np.mean([t.exposed_wait_ms for i, t in enumerate(table) if i != top]))
    notes = []
    if unmatched:
        notes.append(f"{unmatched} collective calls were not found on every rank of their group and are left out "
                     "(calls at the edges of the profiled windows, or windows over different steps)")
    return RanksAnalysis(
        ranks=[r.rank for r in inputs], on_gpu=all(r.calls.on_gpu for r in inputs), steps=n_steps,
        matched=len(matched), unmatched=unmatched, table=table, collectives=colls,
        busbw_gb_s=bytes_total / bytes_time / 1e3 if bytes_time > 0 else None,
        straggler=straggler, straggler_late_ms=s_late, straggler_last_pct=s_last, waited_ms=waited,
        notes=notes,
    )


def _offsets(inputs: list[RankInput], matched: list) -> np.ndarray:
    """Each rank's clock offset (us) against the lowest rank, from the ends of matched calls."""
    diffs: dict[int, list] = defaultdict(list)
    for _, who in matched:
        if 0 not in who:
            continue
        e0 = inputs[0].calls.end[who[0]]
        for ri, ci in who.items():
            diffs[ri].append(inputs[ri].calls.end[ci] - e0)
    return np.array([float(np.median(diffs[ri])) if diffs.get(ri) else 0.0 for ri in range(len(inputs))])


def _compute_intervals(r: RankInput) -> iv.Intervals:
    """The rank's non-communication GPU ops as a normalised interval set (empty on CPU traces)."""
    g = r.trace.gpu
    if not len(g):
        return iv.EMPTY
    comm = np.array([categorize(n) == "communication" for n in r.trace.names], dtype=bool)
    k = ~((g.kind == KERNEL) & comm[g.name])
    return iv.union(g.start[k], g.end[k])


def _gpu_per_step(r: RankInput) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per step window: non-communication GPU time and idle GPU time in ms (means over devices); None on CPU traces."""
    g = r.trace.gpu
    if not len(g):
        return None, None
    comm = np.array([categorize(n) == "communication" for n in r.trace.names], dtype=bool)
    is_comm = (g.kind == KERNEL) & comm[g.name]
    s0, e0 = r.steps.start, r.steps.end
    compute, busy = np.zeros(len(s0)), np.zeros(len(s0))
    devs = np.unique(g.device)
    for d in devs:
        on = g.device == d
        compute += iv.covered_between(iv.union(g.start[on & ~is_comm], g.end[on & ~is_comm]), s0, e0)
        busy += iv.covered_between(iv.union(g.start[on], g.end[on]), s0, e0)
    n = len(devs)
    return compute / 1e3 / n, ((e0 - s0) - busy / n) / 1e3


def _gpu_shares(r: RankInput) -> tuple[float | None, float | None]:
    """Compute (non-communication GPU ops) and idle time per step in ms, over the step windows; None on CPU traces."""
    g = r.trace.gpu
    if not len(g):
        return None, None
    lo, hi = r.steps.window
    comm = np.array([categorize(n) == "communication" for n in r.trace.names], dtype=bool)
    is_comm = (g.kind == KERNEL) & comm[g.name]
    devs = np.unique(g.device)
    compute = busy = 0.0
    for d in devs:
        on = g.device == d
        s, e = np.clip(g.start, lo, hi), np.clip(g.end, lo, hi)
        compute += iv.total(iv.union(s[on & ~is_comm], e[on & ~is_comm]))
        busy += iv.total(iv.union(s[on], e[on]))
    n = r.steps.count * len(devs)
    return compute / 1e3 / n, ((hi - lo) * len(devs) - busy) / 1e3 / n


def activity(r: RankInput) -> dict[str, float]:
    """Where one rank's step time goes outside collectives, in ms per step: `input` (its step thread in
    the DataLoader), `sync` (in synchronizations), `outside_ops` (its step thread running no op: Python
    work between ops), `gpu_compute` (non-communication GPU time; GPU traces only)."""
    from gpucheckup.analysis import host_calls

    host, st = r.trace.host, r.steps
    lo, hi = st.window
    n = max(st.count, 1)
    steps_rows = r.trace.name_ids(lambda nm: nm.startswith("ProfilerStep#"))
    marks = np.flatnonzero(np.isin(host.name, steps_rows))
    tid = host.tid[marks[0]] if len(marks) else (np.bincount(host.tid.clip(0)).argmax() if len(host) else 0)
    on = (host.tid == tid) & ~np.isin(host.name, steps_rows)
    out: dict[str, float] = {}
    rest = iv.clip(iv.union(np.array([lo]), np.array([hi])), lo, hi)
    for name, rows in (("input", host_calls.dataloader_rows(r.trace)),
                       ("sync", np.union1d(host_calls.sync_call_rows(r.trace, r.launch_rows),
                                           host_calls.sync_op_rows(r.trace)))):
        rows = rows[on[rows]] if len(rows) else rows
        cover = iv.clip(iv.union(host.start[rows], host.end[rows]), lo, hi) if len(rows) else iv.EMPTY
        out[name] = iv.total(iv.intersect(rest, cover)) / 1e3 / n
        rest = iv.subtract(rest, cover)
    busy = iv.union(host.start[on], host.end[on])
    out["outside_ops"] = iv.total(iv.subtract(rest, busy)) / 1e3 / n
    compute, _ = _gpu_shares(r)
    if compute is not None:
        out["gpu_compute"] = compute
    return out


def straggler_cause(inputs: list[RankInput], straggler: int,
                    waits: dict[int, float] | None = None) -> tuple[str, float, dict[str, float]]:
    """What the straggler spends more time on than the other ranks (the median of them), per step:
    (the activity with the largest excess, its excess in ms, every activity's excess). A waiting
    rank's host blocks either in a synchronization or between operators (inside backward, say):
    its exposed wait (`waits`, ms per step) is taken out of `sync`, then of `outside_ops`, first."""
    acts = {r.rank: activity(r) for r in inputs}
    for rank, w in (waits or {}).items():
        if rank == straggler or rank not in acts:
            continue
        for key in ("sync", "outside_ops"):
            take = min(w, acts[rank].get(key, 0.0))
            acts[rank][key] = acts[rank].get(key, 0.0) - take
            w -= take
    mine = acts[straggler]
    excess = {}
    for k, v in mine.items():
        others = [a.get(k, 0.0) for rk, a in acts.items() if rk != straggler]
        excess[k] = v - float(np.median(others)) if others else 0.0
    best = max(excess, key=excess.get) if excess else "unknown"
    return best, excess.get(best, 0.0), excess
