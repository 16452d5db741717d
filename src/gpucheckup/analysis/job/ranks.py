"""Ranks side by side: clocks aligned, collectives matched, their time split into wait and transfer.

Definitions (also in docs/metrics.md):
- rank: the trace's `distributedInfo.rank`, else the number in its file name (rank1.json.gz).
- clock offset of rank r: the median over matched collective calls of (end on r - end on the
  lowest rank): a collective ends on every rank within microseconds, whatever its clock.
- a matched call: one key (analysis/one_trace/gpu/collectives.py) present on every rank of its group.
- transfer of a matched call: the shortest duration across its ranks (the last rank to arrive
  waits for nobody: its duration is the data moving); a rank's wait: its duration minus the
  transfer (it arrived early and waited for the others). TraceLens splits them the same way.
- exposed wait: the part of a rank's wait (the first `wait` of its call) during which none of its
  own non-communication GPU ops ran: waiting that costs it time. A prefetched FSDP all-gather
  that waits behind compute waits without cost. On CPU traces every wait is exposed.
- arrival: a call's start on the aligned clock; the last rank to arrive at a call is late by its
  arrival minus the median arrival of the others, and causes the others' exposed wait there. A rank's
  lateness in a step is its largest lateness at the calls of that step (one delay makes it late at
  every later call of the step too: summed, it would count the same delay once per call and could
  exceed the step); late_ms is its mean over the steps.
- per rank, per step, each the median over the profiled steps (robust to a long first step; the
  same step on ranks that run in lockstep): step_ms (step window), transfer_ms, wait_ms,
  exposed_wait_ms (sums over its calls in that step), compute_ms (GPU time of non-communication
  kernels, copies and memsets; on CPU traces: the step less transfer and wait), idle_ms (step
  less the union of every GPU op; 0 on CPU traces); late_ms: its lateness per step, the mean.
- straggler: the rank that causes at least STRAGGLER_SHARE of all exposed wait (the others'
  mean exposed wait at the calls it arrives last at), when that is at least STRAGGLER_STEP_PCT
  of the median step per step, and it arrives last far more often than 1/N of the calls would
  have it (N ranks): at least halfway from chance to always, (1 + 1/N) / 2 of the calls whose
  last rank was at least MIN_LATE_US late (75% of them on two ranks, 67% on three, just over
  half on many). Two equal ranks take turns: one last at 59% of the calls is a coin flip, not a
  straggler, though the others' waits behind it add up. Then the others wait for it.
- busbw per collective: bytes / transfer x nccl-tests' factor (hardware/links.py), the median
  over its calls; the job's busbw: the byte-weighted mean over every call.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.one_trace.gpu.collectives import Calls, collective_calls
from gpucheckup.analysis.distinct import median, percentile, union1d, unique
from gpucheckup.analysis.one_trace.gpu.kernels import categorize
from gpucheckup.analysis.one_trace.launches import launch_rows
from gpucheckup.analysis.one_trace.steps import Steps, find_steps
from gpucheckup.hardware import links
from gpucheckup.trace.tables import KERNEL, Trace

STRAGGLER_SHARE = 0.6  # of all lateness, on one rank
STRAGGLER_STEP_PCT = 10.0  # exposed wait per step, % of the median step: the bar checkup.STRAGGLER_PCT sets for a slow rank
MIN_LATE_US = 50.0  # a call whose last rank is later than this counts towards lateness


def last_often(last: int, calls: int, ranks: int) -> bool:
    """Whether a rank last at `last` of `calls` late calls is last far more often than 1/ranks: at least halfway
    from chance to always."""
    return calls > 0 and ranks >= 2 and last / calls >= (1 + 1 / ranks) / 2


@dataclass
class RankInput:
    """What the cross-rank analysis needs from one trace, and no more: its step windows, collective calls,
    compute intervals, per-step compute and idle, and activities (a few KB per step), so that a worker
    process reading the trace can send it back instead of the trace's tables."""

    rank: int | None  # None: not in the trace; the caller numbers it (its place in rank order)
    steps: Steps
    calls: Calls
    computing: iv.Intervals  # non-communication GPU ops, union over devices (empty on CPU traces)
    step_compute_ms: np.ndarray | None  # per step window, means over devices; None on CPU traces
    step_idle_ms: np.ndarray | None
    compute_ms: float | None  # per step over the step windows (_gpu_shares)
    idle_ms: float | None
    activity: dict[str, float]  # activity(): where its step time goes outside collectives
    device: str = ""
    compute_capability: str = ""


def rank_input(trace: Trace, fallback_rank: int | None = None, rows: np.ndarray | None = None,
               steps: Steps | None = None) -> RankInput:
    """The compact cross-rank table of one trace (`rows`, `steps`: its launch rows and steps when known)."""
    rows = launch_rows(trace) if rows is None else rows
    st = find_steps(trace, rows) if steps is None else steps
    rank = trace.rank if trace.rank is not None else fallback_rank
    comm = np.array([categorize(n) == "communication" for n in trace.names], dtype=bool)
    step_compute, step_idle = _gpu_per_step(trace, st, comm)
    compute, idle = _gpu_shares(trace, st, comm)
    dev = trace.devices[0] if trace.devices else None
    return RankInput(rank=rank, steps=st, calls=collective_calls(trace, st, rows),
                     computing=_compute_intervals(trace, comm), step_compute_ms=step_compute, step_idle_ms=step_idle,
                     compute_ms=compute, idle_ms=idle, activity=activity(trace, st, rows, compute),
                     device=dev.name if dev else "", compute_capability=dev.compute_capability if dev else "")


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
    late_ms: float  # how late it arrives per step: its largest lateness in each step, the mean over steps
    last_pct: float  # share of matched calls it arrived last at
    offset_us: float  # its clock offset against the lowest rank


DISTRIBUTED = ("step_ms", "compute_ms", "transfer_ms", "wait_ms", "idle_ms", "late_ms")  # the table's columns
OUTLIER_MADS = 5.0  # a rank this many median absolute deviations above the median stands out


def distribution(rows: list[RankRow]) -> list[dict]:
    """Per column of the rank table: min, median, p90, max over the ranks, and the outlier ranks (more than
    OUTLIER_MADS median absolute deviations above the median; the deviation at least 1% of the median): how a
    job of hundreds of ranks is summarised."""
    out = []
    for col in DISTRIBUTED:
        v = np.array([getattr(r, col) or 0.0 for r in rows], dtype=float)
        med = float(median(v))
        floor = max(float(median(np.abs(v - med))), 0.01 * abs(med), 1e-3)
        out.append({"figure": col, "min": float(v.min()), "median": med, "p90": float(percentile(v, 90)),
                    "max": float(v.max()), "outliers": [r.rank for r, x in zip(rows, v) if x - med > OUTLIER_MADS * floor]})
    return out


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
    call_waits: dict[int, np.ndarray] = field(default_factory=dict)  # rank -> wait (us) of each of its calls, nan unmatched


def analyze_ranks(inputs: list[RankInput]) -> RanksAnalysis | None:
    """Match the ranks' collectives and split their time; None with fewer than 2 ranks holding calls."""
    inputs = sorted([r for r in inputs if len(r.calls)], key=lambda r: r.rank)
    if len(inputs) < 2:
        return None
    matched, unmatched = _matched_calls(inputs)
    offsets = _offsets(inputs, matched)
    n_steps = max(1, min(len(set(k[2] for k, _ in matched)), min(r.steps.count for r in inputs)))
    split = _split_calls(inputs, matched, offsets)
    steps_ms = np.array([float(median(r.steps.duration)) / 1e3 for r in inputs])
    table = _rank_rows(inputs, split, steps_ms, offsets, n_steps, len(matched))
    straggler, s_late, s_last, waited = _straggler(inputs, split, table, steps_ms, n_steps)
    notes = []
    if unmatched:
        notes.append(f"{unmatched} collective calls were not found on every rank of their group and are left out "
                     "(calls at the edges of the profiled windows, or windows over different steps)")
    return RanksAnalysis(
        ranks=[r.rank for r in inputs], on_gpu=all(r.calls.on_gpu for r in inputs), steps=n_steps,
        matched=len(matched), unmatched=unmatched, table=table, collectives=_collective_rows(split.per_coll, n_steps),
        busbw_gb_s=split.bytes_total / split.bytes_time / 1e3 if split.bytes_time > 0 else None,
        straggler=straggler, straggler_late_ms=s_late, straggler_last_pct=s_last, waited_ms=waited,
        notes=notes, call_waits={r.rank: w for r, w in zip(inputs, split.call_waits)},
    )


def _matched_calls(inputs: list[RankInput]) -> tuple[list[tuple[tuple, dict[int, int]]], int]:
    """The collective calls found on every rank of their group ((key, {rank index: call index})), and how many
    calls were not."""
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
    return matched, len(by_key) - len(matched)


@dataclass
class _Split:
    """Each rank's collective time split over the matched calls (us): the exposed wait its lateness caused on the
    others and how often it came last; each call's wait; per step label the transfer (the fastest rank's duration),
    the wait beyond it, the wait not hidden by compute, and its largest lateness; per collective (name, bytes, group
    size) its calls' transfer and mean wait; the bus bytes and their transfer time."""

    caused: np.ndarray
    last_count: np.ndarray
    call_waits: list[np.ndarray]
    per_step: list[dict]
    late_in_step: list[dict]
    per_coll: dict[tuple, list] = field(default_factory=lambda: defaultdict(list))
    bytes_total: float = 0.0
    bytes_time: float = 0.0


def _split_calls(inputs: list[RankInput], matched: list, offsets: np.ndarray) -> _Split:
    """Split every matched call's time on each rank (_Split), its start aligned by the rank's clock offset."""
    n = len(inputs)
    sp = _Split(np.zeros(n), np.zeros(n),
                [np.full(len(r.calls), np.nan) for r in inputs],
                [defaultdict(lambda: np.zeros(3)) for _ in inputs],  # step label -> transfer, wait, exposed
                [defaultdict(float) for _ in inputs])  # step label -> its largest lateness there
    computing = [r.computing for r in inputs]
    for k, who in matched:
        ris = np.array(list(who))
        cis = np.array([who[ri] for ri in ris])
        start = np.array([inputs[ri].calls.start[ci] - offsets[ri] for ri, ci in zip(ris, cis)])
        dur = np.array([inputs[ri].calls.end[ci] - inputs[ri].calls.start[ci] for ri, ci in zip(ris, cis)])
        tr = float(dur.min())
        for ri, ci, w in zip(ris, cis, dur - tr):
            sp.call_waits[ri][ci] = w
        own_start = np.array([inputs[ri].calls.start[ci] for ri, ci in zip(ris, cis)])
        ex = np.array([(d - tr) - float(iv.covered_between(computing[ri], s0, s0 + d - tr))
                       for ri, s0, d in zip(ris, own_start, dur)])
        for j, ri in enumerate(ris):
            sp.per_step[ri][k[2]] += (tr, dur[j] - tr, ex[j])
        last = int(np.argmax(start))
        lateness = float(start[last] - median(np.delete(start, last)))
        if lateness >= MIN_LATE_US:
            sp.late_in_step[ris[last]][k[2]] = max(sp.late_in_step[ris[last]][k[2]], lateness)
            sp.last_count[ris[last]] += 1
            sp.caused[ris[last]] += float(np.delete(ex, last).mean())
        c0 = inputs[ris[0]].calls
        nbytes = float(c0.nbytes[cis[0]])
        size = int(c0.group_size[cis[0]]) if np.isfinite(c0.group_size[cis[0]]) else len(ris)
        sp.per_coll[(k[1], nbytes, size)].append((tr, float((dur - tr).mean())))
        if nbytes > 0 and tr > 0:
            sp.bytes_total += nbytes * links.bus_factor(k[1], size)
            sp.bytes_time += tr
    return sp


def _rank_rows(inputs: list[RankInput], sp: _Split, steps_ms: np.ndarray, offsets: np.ndarray, n_steps: int,
               n_matched: int) -> list[RankRow]:
    """One row per rank: medians over its steps; lateness per step (its largest in each step, over the steps)."""
    late = np.array([sum(d.values()) for d in sp.late_in_step])
    table = []
    for ri, r in enumerate(inputs):
        tr, wt, ex = np.array([sp.per_step[ri].get(lb, np.zeros(3)) for lb in r.steps.labels]).T / 1e3
        compute, idle = r.step_compute_ms, r.step_idle_ms
        if compute is None:  # CPU traces: the step less its collectives
            compute, idle = np.maximum(r.steps.duration / 1e3 - tr - wt, 0.0), np.zeros(len(tr))
        med = lambda x: float(median(x))  # noqa: E731
        table.append(RankRow(rank=r.rank, step_ms=steps_ms[ri], compute_ms=med(compute), transfer_ms=med(tr),
                             wait_ms=med(wt), exposed_wait_ms=med(ex), idle_ms=med(idle),
                             late_ms=late[ri] / 1e3 / n_steps,
                             last_pct=100 * sp.last_count[ri] / max(n_matched, 1), offset_us=offsets[ri]))
    return table


def _collective_rows(per_coll: dict[tuple, list], n_steps: int) -> list[CollectiveRow]:
    """One row per collective (name, bytes, group size), the largest transfer first; bus bandwidth per call."""
    colls = []
    for (name, nbytes, size), vals in sorted(per_coll.items(), key=lambda kv: -sum(v[0] for v in kv[1])):
        trs = np.array([v[0] for v in vals])
        bws = [links.busbw_gb_s(name, nbytes, t / 1e3, size) for t in trs if t > 0]
        bws = [b for b in bws if b is not None]
        colls.append(CollectiveRow(name=name, bytes=nbytes, count=len(vals), transfer_ms=float(trs.sum()) / 1e3 / n_steps,
                                   wait_ms=float(sum(v[1] for v in vals)) / 1e3 / n_steps,
                                   busbw_gb_s=float(median(bws)) if bws else None, group_size=size))
    return colls


def _straggler(inputs: list[RankInput], sp: _Split, table: list[RankRow], steps_ms: np.ndarray,
               n_steps: int) -> tuple[int | None, float, float, float]:
    """The straggler (the rank whose lateness caused STRAGGLER_SHARE of the others' exposed wait, last often and
    late by STRAGGLER_STEP_PCT of the step), its lateness per step, how often it came last, the others' wait; else
    None and zeros."""
    total_caused = sp.caused.sum()
    if total_caused <= 0:
        return None, 0.0, 0.0, 0.0
    top = int(np.argmax(sp.caused))
    per_step = sp.caused[top] / 1e3 / n_steps
    if not (sp.caused[top] >= STRAGGLER_SHARE * total_caused
            and last_often(int(sp.last_count[top]), int(sp.last_count.sum()), len(inputs))
            and per_step >= STRAGGLER_STEP_PCT / 100 * float(median(steps_ms))):
        return None, 0.0, 0.0, 0.0
    late = sum(sp.late_in_step[top].values())
    waited = float(np.mean([t.exposed_wait_ms for i, t in enumerate(table) if i != top]))
    return inputs[top].rank, late / 1e3 / n_steps, table[top].last_pct, waited


def _offsets(inputs: list[RankInput], matched: list) -> np.ndarray:
    """Each rank's clock offset (us) against the lowest rank, from the ends of matched calls."""
    diffs: dict[int, list] = defaultdict(list)
    for _, who in matched:
        if 0 not in who:
            continue
        e0 = inputs[0].calls.end[who[0]]
        for ri, ci in who.items():
            diffs[ri].append(inputs[ri].calls.end[ci] - e0)
    return np.array([float(median(diffs[ri])) if diffs.get(ri) else 0.0 for ri in range(len(inputs))])


def _compute_intervals(trace: Trace, comm: np.ndarray) -> iv.Intervals:
    """The trace's non-communication GPU ops as a normalised interval set (empty on CPU traces);
    `comm`: per name id, whether it is a communication kernel."""
    g = trace.gpu
    if not len(g):
        return iv.EMPTY
    k = ~((g.kind == KERNEL) & comm[g.name])
    return iv.union(g.start[k], g.end[k])


def _gpu_per_step(trace: Trace, st: Steps, comm: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per step window: non-communication GPU time and idle GPU time in ms (means over devices); None on CPU traces."""
    g = trace.gpu
    if not len(g):
        return None, None
    is_comm = (g.kind == KERNEL) & comm[g.name]
    s0, e0 = st.start, st.end
    compute, busy = np.zeros(len(s0)), np.zeros(len(s0))
    devs = unique(g.device)
    for d in devs:
        on = g.device == d
        compute += iv.covered_between(iv.union(g.start[on & ~is_comm], g.end[on & ~is_comm]), s0, e0)
        busy += iv.covered_between(iv.union(g.start[on], g.end[on]), s0, e0)
    n = len(devs)
    return compute / 1e3 / n, ((e0 - s0) - busy / n) / 1e3


def _gpu_shares(r, st: Steps | None = None, comm: np.ndarray | None = None) -> tuple[float | None, float | None]:
    """Compute (non-communication GPU ops) and idle time per step in ms, over the step windows; None on CPU
    traces. `r`: a RankInput (its stored figures), or a Trace with its steps and communication name mask."""
    if isinstance(r, RankInput):
        return r.compute_ms, r.idle_ms
    g = r.gpu
    if not len(g):
        return None, None
    lo, hi = st.window
    is_comm = (g.kind == KERNEL) & comm[g.name]
    devs = unique(g.device)
    compute = busy = 0.0
    for d in devs:
        on = g.device == d
        s, e = np.clip(g.start, lo, hi), np.clip(g.end, lo, hi)
        compute += iv.total(iv.union(s[on & ~is_comm], e[on & ~is_comm]))
        busy += iv.total(iv.union(s[on], e[on]))
    n = st.count * len(devs)
    return compute / 1e3 / n, ((hi - lo) * len(devs) - busy) / 1e3 / n


def activity(trace: Trace, st: Steps, rows: np.ndarray, compute: float | None) -> dict[str, float]:
    """Where one rank's step time goes outside collectives, in ms per step: `input` (its step thread in
    the DataLoader), `sync` (in synchronizations), `outside_ops` (its step thread running no op: Python
    work between ops), `gpu_compute` (non-communication GPU time, `compute`; GPU traces only)."""
    from gpucheckup.analysis.one_trace.host import host_calls

    host = trace.host
    lo, hi = st.window
    n = max(st.count, 1)
    steps_rows = trace.name_ids(lambda nm: nm.startswith("ProfilerStep#"))
    marks = np.flatnonzero(np.isin(host.name, steps_rows))
    if len(marks):
        tid = host.tid[marks[0]]
    else:  # the thread with the most events (a bincount over thread ids would be as large as the largest id)
        ids, counts = np.unique(host.tid, return_counts=True)
        tid = ids[counts.argmax()] if len(ids) else 0
    on = (host.tid == tid) & ~np.isin(host.name, steps_rows)
    out: dict[str, float] = {}
    rest = iv.clip(iv.union(np.array([lo]), np.array([hi])), lo, hi)
    for name, sel in (("input", host_calls.dataloader_rows(trace)),
                      ("sync", union1d(host_calls.sync_call_rows(trace, rows), host_calls.sync_op_rows(trace)))):
        sel = sel[on[sel]] if len(sel) else sel
        cover = iv.clip(iv.union(host.start[sel], host.end[sel]), lo, hi) if len(sel) else iv.EMPTY
        out[name] = iv.total(iv.intersect(rest, cover)) / 1e3 / n
        rest = iv.subtract(rest, cover)
    busy = iv.union(host.start[on], host.end[on])
    out["outside_ops"] = iv.total(iv.subtract(rest, busy)) / 1e3 / n
    if compute is not None:
        out["gpu_compute"] = compute
    return out


def straggler_cause(inputs: list[RankInput], straggler: int,
                    waits: dict[int, float] | None = None) -> tuple[str, float, dict[str, float]]:
    """What the straggler spends more time on than the other ranks (the median of them), per step:
    (the activity with the largest excess, its excess in ms, every activity's excess). A waiting
    rank's host blocks either in a synchronization or between operators (inside backward, say):
    its exposed wait (`waits`, ms per step) is taken out of `sync`, then of `outside_ops`, first."""
    acts = {r.rank: dict(r.activity) for r in inputs}
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
        excess[k] = v - float(median(others)) if others else 0.0
    best = max(excess, key=excess.get) if excess else "unknown"
    return best, excess.get(best, 0.0), excess
