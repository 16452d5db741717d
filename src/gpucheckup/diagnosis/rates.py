"""How often something happens, as a person counts it: "2.5 per step", or "1 in 30 steps" when it happens
less than once a step (a rate of 0.0 per step beside a cost would read as a contradiction)."""

from __future__ import annotations


def per_step(count: int, steps: int, marked: bool = True) -> str:
    """`count` events over `steps` steps: "N.N per step" at one a step or more, else "N in S steps"; a trace
    with no ProfilerStep markers (`marked` False) has no steps: "N in the whole trace"."""
    if steps <= 0 or not marked:
        return f"{count} in the whole trace"
    if count >= steps or count == 0:
        return f"{count / steps:.1f} per step"
    return f"{count} in {steps} step{'s' if steps > 1 else ''}"
