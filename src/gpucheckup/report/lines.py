"""Plain-text lines every report format prints the same way (terminal, HTML, Markdown)."""

from __future__ import annotations

MAX_EVENTS = 3  # evidence events shown under each finding (the JSON has them all)


def event_line(ev: dict) -> str:
    """One evidence event: when (ms from the trace's first event, or the run's start), what, where, how long."""
    return f"at {ev['start_ms']:.3f} ms: {ev['name']} on {ev['where']} ({ev['dur_ms']:.3f} ms)"


def step_line(r: dict) -> str:
    """The step time every figure is expressed in, and what it is."""
    w = r["window"]
    return f"step {w['step_ms']:.2f} ms ({w['basis']})"


def cost_line(f: dict) -> str:
    """A finding's cost: ms per step and percent of the step time."""
    return f"{f['cost_ms_per_step']:.2f} ms/step ({f['cost_pct_of_step']:.1f}%)"
