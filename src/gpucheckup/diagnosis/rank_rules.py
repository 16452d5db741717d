"""Rules over ranks side by side: the straggler and its cause, the link's speed, and what waiting ranks are told.

- straggler (analysis/job/ranks.py defines it): a finding naming the rank the others wait for, how
  late it arrives per step, and its own cause: the activity it spends more time on than the
  other ranks (analysis/ranks.straggler_cause), named when that excess explains at least
  CAUSE_SHARE of its lateness, and any clock throttling of its GPU in the NVML rows.
  The job's verdict is the straggler's own bound (from its own check-up when its trace has a
  GPU timeline, else the cause's bound).
- slow link: the byte-weighted busbw of collectives of at least MIN_LINK_BYTES below
  LINK_LOW_PCT of the link's figure (hardware/links.py) is a configuration finding ranked
  before any other communication fix, with the transport variables seen in the environment.
- waiting ranks: communication time that is waiting for the straggler is skew, not transfer:
  their exposed-communication finding loses that time, keeps at most their own transfer time,
  and goes when less than its threshold is left; their verdict is re-ranked without the wait
  (`waiting` when the wait is the largest share).
"""

from __future__ import annotations

from gpucheckup.analysis.job.ranks import STRAGGLER_SHARE, STRAGGLER_STEP_PCT, RanksAnalysis
from gpucheckup.diagnosis.findings import Diagnosis, Finding, Fix

CAUSE_SHARE = 0.5  # of the straggler's lateness, for one activity to be named its cause
LINK_LOW_PCT = 25.0  # busbw below this share of the link: a transport problem, not a tuning one
MIN_LINK_BYTES = 1 << 20  # smaller messages are latency-bound: their busbw says little about the link
TRANSPORT_VARS = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_SOCKET_IFNAME",
                  "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL", "NCCL_ALGO", "NCCL_PROTO")
CAUSE_BOUND = {"input": "input_bound", "sync": "sync_bound", "outside_ops": "launch_bound",
               "gpu_compute": "gpu_bound"}
CAUSE_TEXT = {"input": "waiting for its DataLoader", "sync": "in host-GPU synchronizations",
              "outside_ops": "in host work between operators (Python, launches)",
              "gpu_compute": "in GPU compute (a slower GPU or more work on this rank)"}
# The same causes on ranks with no device activity: nothing is launched, so host work is Python and operators.
CPU_CAUSE_TEXT = {**CAUSE_TEXT, "sync": "in waits on the host", "outside_ops": "in host work between operators (Python)",
                  "gpu_compute": "in its operators (more work on this rank or a slower core)"}
COMM_FINDING = "exposed_communication"
COMM_FIX_KEYS = ("Tune DDP bucketing", "Check NCCL's transport")  # replaced by the slow-link finding


def straggler_finding(ra: RanksAnalysis, cause: str, excess_ms: float, excess: dict[str, float],
                      throttled: str | None) -> Finding | None:
    """The rank every other rank waits for, and what it does meanwhile."""
    if ra.straggler is None:
        return None
    step = max(r.step_ms for r in ra.table)
    named = excess_ms >= CAUSE_SHARE * ra.straggler_late_ms
    evidence = [
        f"rank {ra.straggler} arrives last at {ra.straggler_last_pct:.0f}% of the {ra.matched} matched collective calls, "
        f"{ra.straggler_late_ms:.2f} ms per step after the others; they wait {ra.waited_ms:.2f} ms per step "
        f"inside their collectives with no compute of their own beside it ({100 * ra.waited_ms / step:.0f}% of the step)",
        "per step, rank %d spends more than the other ranks: %s" % (
            ra.straggler, ", ".join(f"{k} {v:+.2f} ms" for k, v in sorted(excess.items(), key=lambda kv: -kv[1]))),
    ]
    if throttled:
        evidence.append(throttled)
    fixes = []
    if named and cause == "input":
        fixes += [Fix(f"Speed up rank {ra.straggler}'s input: DataLoader(num_workers=..., pin_memory=True, "
                      "persistent_workers=True), and check its data source (disk, network share) against the others'",
                      "config", ra.waited_ms, key="dataloader_workers")]
    elif named and cause == "sync":
        fixes += [Fix(f"Remove rank {ra.straggler}'s host-GPU synchronizations (.item(), .cpu(), logging, metrics on "
                      "rank 0 only)", "code", ra.waited_ms)]
    elif named and cause == "outside_ops":
        fixes += [Fix(f"Move rank {ra.straggler}'s extra host work (evaluation, logging, checkpointing on one rank) "
                      "off the training step or spread it over ranks", "code", ra.waited_ms)]
    elif named and cause == "gpu_compute":
        fixes += [Fix(f"Balance the work: rank {ra.straggler} computes longer (uneven batches or sequence lengths, "
                      "or a slower or throttled GPU: check its clocks and temperature)", "code", ra.waited_ms)]
    else:
        fixes += [Fix(f"Look at rank {ra.straggler}'s own check-up below: no one activity explains its lateness",
                      "code", ra.waited_ms)]
    what = (CAUSE_TEXT if ra.on_gpu else CPU_CAUSE_TEXT).get(cause, cause) if named else "with no single cause"
    return Finding(
        id="straggler", severity="critical" if 100 * ra.waited_ms / step >= 20 else "warning",
        title=f"Rank {ra.straggler} is the straggler: the others wait for it, {what}",
        rule=(f"one rank causes >= {100 * STRAGGLER_SHARE:.0f}% of the others' exposed wait, and that wait is "
              f">= {STRAGGLER_STEP_PCT:g}% of the step"),
        cost_ms_per_step=ra.waited_ms, cost_pct_of_step=100 * ra.waited_ms / step, evidence=evidence, fixes=fixes)


def slow_link_finding(ra: RanksAnalysis, link_gb_s: float | None, link_from: str, env: dict) -> Finding | None:
    """Collectives far slower than the link: the transport first."""
    if link_gb_s is None:
        return None
    big = [c for c in ra.collectives if c.bytes >= MIN_LINK_BYTES and c.busbw_gb_s]
    if not big:
        return None
    weight = sum(c.transfer_ms for c in big)
    bw = sum(c.busbw_gb_s * c.transfer_ms for c in big) / weight if weight else 0.0
    if bw >= LINK_LOW_PCT / 100 * link_gb_s:
        return None
    saving = weight * (1 - bw / link_gb_s)
    seen = {k: v for k, v in (env or {}).items() if k in TRANSPORT_VARS}
    evidence = [f"collectives of >= {MIN_LINK_BYTES >> 20} MiB reach {bw:.1f} GB/s bus bandwidth, "
                f"{100 * bw / link_gb_s:.1f}% of the link's {link_gb_s:.0f} GB/s ({link_from}); "
                f"rule: below {LINK_LOW_PCT:g}%",
                f"their transfer takes {weight:.2f} ms per step"]
    if seen:
        evidence.append("transport variables set: " + ", ".join(f"{k}={v}" for k, v in sorted(seen.items())))
    how = ("unset " + ", ".join(k for k in seen if k.endswith("_DISABLE")) if any(k.endswith("_DISABLE") for k in seen)
           else "run with NCCL_DEBUG=INFO and read which transport each channel uses (P2P/NVLink, SHM, NET/Socket)")
    return Finding(
        id="slow_link", severity="critical", title="Collectives run far below the link's bandwidth: check NCCL's transport",
        rule=f"byte-weighted busbw of collectives >= {MIN_LINK_BYTES >> 20} MiB < {LINK_LOW_PCT:g}% of the link",
        cost_ms_per_step=saving, cost_pct_of_step=100 * saving / max(r.step_ms for r in ra.table), evidence=evidence,
        fixes=[Fix("Fix NCCL's transport: " + how + " (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE or NCCL_IB_DISABLE force "
                   "slower paths; a socket fallback moves data through the host)", "config", saving, how=how,
                   key="nccl_transport")])


def discount_wait(d: Diagnosis, wait_ms: float, straggler: int, step_ms: float, transfer_ms: float) -> None:
    """A waiting rank: its communication time that is waiting for the straggler is not offered fixes; what
    is left is at most its own transfer time (the most a faster transfer or better overlap could save)."""
    from gpucheckup.diagnosis.rules import COMM_EXPOSED_PCT

    if wait_ms <= 0 or step_ms <= 0:
        return
    kept = []
    for f in d.findings:
        if f.id != COMM_FINDING:
            kept.append(f)
            continue
        left = min(max(f.cost_ms_per_step - wait_ms, 0.0), transfer_ms)
        if 100 * left / step_ms < COMM_EXPOSED_PCT:
            d.notes.append(f"{min(wait_ms, f.cost_ms_per_step):.2f} ms per step of this rank's communication is "
                           f"waiting for rank {straggler} (skew, not transfer): see the straggler finding")
            continue
        f.evidence.append(f"{wait_ms:.2f} ms per step of it is waiting for rank {straggler}, not transfer: "
                          "left out of the cost")
        f.cost_ms_per_step, f.cost_pct_of_step = left, 100 * left / step_ms
        for fix in f.fixes:
            fix.saving_ms = min(fix.saving_ms, left)
        kept.append(f)
    d.findings = kept
    d.notes.append(f"this rank waits {wait_ms:.2f} ms per step for rank {straggler} with nothing of its own to run")
    # A waiting NCCL kernel counts as GPU busy: take the wait out of the scores it inflates.
    pct = 100 * wait_ms / step_ms
    for key in ("communication_bound", "gpu_bound"):
        if key in d.scores:
            d.scores[key] = max(d.scores[key] - pct, 0.0)
    d.scores["waiting"] = pct
    best = max(d.scores, key=d.scores.get)
    if best != d.primary:
        d.reason = (f"{d.reason}; but {wait_ms:.2f} ms per step ({pct:.0f}%) of it is waiting for rank {straggler}, "
                    f"the straggler: that, not this rank's own work, sets its pace")
        d.primary = "waiting" if best == "waiting" else best


def drop_comm_tuning(d: Diagnosis) -> None:
    """With a slow link, bucketing and a generic transport check are not the first fixes: drop them."""
    for f in d.findings:
        if f.id == COMM_FINDING:
            f.fixes = [x for x in f.fixes if not x.action.startswith(COMM_FIX_KEYS)]
