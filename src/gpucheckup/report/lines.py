"""Plain-text lines every report format prints the same way (terminal, HTML, Markdown)."""

from __future__ import annotations

from gpucheckup.diagnosis.rates import per_step
from gpucheckup.report.hardware_text import mfu_short

WHOLE_TRACE = "whole trace, no ProfilerStep markers"  # what a "step" is in a trace without them
MAX_EVENTS = 3  # evidence events shown under each finding (the JSON has them all)


def event_line(ev: dict) -> str:
    """One evidence event: when (ms from the trace's first event, or the run's start), what, where, how long."""
    return f"at {ev['start_ms']:.3f} ms: {ev['name']} on {ev['where']} ({ev['dur_ms']:.3f} ms)"


def step_line(r: dict) -> str:
    """The step time every figure is expressed in, and what it is."""
    w = r["window"]
    return f"step {w['step_ms']:.2f} ms ({w['basis']})"


def busy_line(r: dict) -> str:
    """GPU busy % as traced, with the busy % without the profiler when its step time is known."""
    g = r["gpu"]
    unprof = f" ({g['busy_pct_unprofiled']:.0f}% without the profiler)" if g.get("busy_pct_unprofiled") else ""
    return f"GPU busy {g['busy_pct']:.1f}%{unprof}"


def sync_rate(r: dict) -> str:
    """Synchronizations counted honestly: "2.0 per step", or "1 in 30 steps" (diagnosis/rates.py)."""
    return per_step(r["sync"]["count"], r["steps"]["count"], r["steps"]["marked"])


def cost_line(f: dict) -> str:
    """A finding's cost: ms per step and percent of the step time; one that was not finite (None) says so."""
    ms, pct = f["cost_ms_per_step"], f["cost_pct_of_step"]
    return "cost not measurable" if ms is None or pct is None else f"{ms:.2f} ms/step ({pct:.1f}%)"


def key_figures(r: dict) -> list[tuple[str, str]]:
    """The headline figures as (name, value) text pairs: the one list the terminal, HTML and Markdown print."""
    s, k, c = r["steps"], r["kernels"], r["copies"]
    if s["marked"]:
        rows = [
            ("step time (median / min / max)", f"{s['median_ms']:.2f} / {s['min_ms']:.2f} / {s['max_ms']:.2f} ms"),
            ("step time spread (CV)", f"{s['cv_pct']:.1f}%"),
        ]
    else:
        rows = [(f"step time ({WHOLE_TRACE})", f"{s['median_ms']:.2f} ms")]
    rows += [
        ("GPU busy", f"{r['gpu']['busy_pct']:.1f}%"),
        ("MFU", mfu_short(r)),
    ]
    for cause, pct in r["gaps"]["pct_of_step"].items():
        if pct is not None and pct >= 0.5:  # None: not finite (an absurd trace)
            rows.append((f"GPU idle: {r['gaps']['cause_titles'].get(cause, cause)}", f"{pct:.1f}% of step"))
    rows += [
        ("idle pattern", r["gaps"]["pattern"]["shape"]),
        (f"kernels (count / mean / under {k['small_threshold_us']:g} us)",
         f"{k['count']} / {k['mean_us']:.1f} us / {k['small_pct']:.1f}%"),
        ("data movement share of kernel time", f"{k['categories'].get('data_movement', 0.0):.1f}%"),
        ("copies (share of GPU time / pageable)", f"{c['pct_of_gpu_time']:.1f}% / {c['pageable_count']}"),
        ("synchronizations", sync_rate(r)),
        ("DataLoader wait", f"{r['dataloader']['pct_of_step']:.1f}% of step"),
    ]
    if r.get("labels"):  # diagnosis/labels.py
        rows.append(("job label (for schedulers)", f"{r['labels']['intensity']}-intensive ({r['labels']['reason']})"))
    return rows


HOST_VERDICTS = ("launch_bound",)  # verdicts read from host-side idle time, which the profiler inflates
PROFILER_COST = "+33% to +69% step time on launch-bound jobs measured on an H200"  # analysis/profiler_overhead.py


def profiler_caveat(r: dict) -> str | None:
    """A host-side verdict read from a profiled trace with no unprofiled step time: the profiler's own host
    cost may have made it; how to get the true verdict. None when it does not apply."""
    if r["verdict"]["primary"] not in HOST_VERDICTS or r.get("profiler"):
        return None
    return ("caution: torch.profiler adds host cost to every op (" + PROFILER_COST + "), which can make a "
            "GPU-bound job read launch-bound; for the true verdict pass --unprofiled-step-ms MS or record "
            "unprofiled steps with `gpucheckup run`")


def rel_ms(r: dict, t_us: float) -> float:
    """A time on the trace's clock as a person reads it: ms from the trace's first event."""
    return (t_us - (r["trace"].get("start_us") or 0.0)) / 1000


def step_label(r: dict, index: int) -> str:
    """The one numbering of steps every table and plot uses: the ProfilerStep number (`#12`), else the label."""
    labels = r["steps"].get("labels") or []
    label = labels[index] if 0 <= index < len(labels) else str(index)
    return label[len("ProfilerStep"):] if label.startswith("ProfilerStep") else label


def plain_value(v) -> str:
    """A value as a person reads it: lists joined (each distinct value once), not Python's repr."""
    if isinstance(v, (list, tuple)):
        return ", ".join(dict.fromkeys(plain_value(x) for x in v)) or "-"
    return "-" if v is None else str(v)


def version_text(kind: str, v) -> str:
    """Library versions as released: CUDA 12040 -> 12.4, cuDNN 91900 -> 9.19.0 (8907 -> 8.9.7); text as given."""
    if isinstance(v, str) and v.isdigit():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        return plain_value(v)
    if kind == "cuda":
        return f"{v // 1000}.{(v % 1000) // 10}"
    if kind == "cudnn":
        major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return str(v)
