"""Compare two check-ups (reports of `gpucheckup analyze`, from run directories or JSON): every
figure side by side, its change, and whether the change is beyond noise.

Definitions (also in docs/metrics.md, "Compare"):
- figures: every number in the report outside the descriptive parts (SKIP_PREFIXES: paths,
  times of day, process ids, environment, plot data), by its dotted key; a check-up that could not
  record syncs (`sync.recorded` false: a light window without --light-syncs) has no `sync.*` figures.
- headline: the step time (docs/metrics.md, "The step time"): the run's unprofiled step
  (`run_figures.steps.unprofiled_ms`, the throughput of its unprofiled steps) when both reports
  have it, else the median of the second half of the unprofiled steps
  (`run_figures.steps.late_median_ms`: runs whose steps never settle), else the window's step
  (`window.step_ms`). change = B / A - 1, percent.
- noise: NOISE_K (2) x the larger coefficient of variation of the two captures' step times
  (`run_figures.steps.cv_pct`, else the cv of the second half of the unprofiled steps in
  `step_history`, else `steps.cv_pct`), at least MIN_NOISE_PCT (1%). Step times moving by their own spread between
  two captures of one job is noise; twice that is not.
- beyond noise: a figure whose relative change exceeds the noise; for percentages (`*_pct`)
  the change in points is compared with it. A figure missing on one side is a change.
- verdict change: `verdict.primary` of A and of B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NOISE_K = 2.0
MIN_NOISE_PCT = 1.0
SKIP_PREFIXES = ("gpucheckup_version", "trace.", "run.", "env.", "timeline.", "gaps.histogram.", "nvml.",
                 "step_history.", "plots.", "perfetto.")
SKIP_WORDS = ("epoch", "pid", "base_time", "_us_at", "hostname")
HEADLINES = ("run_figures.steps.unprofiled_ms", "run_figures.steps.late_median_ms", "window.step_ms")


@dataclass
class FigureChange:
    """One figure in both check-ups."""

    key: str
    a: float | None
    b: float | None
    change: float | None  # percent (relative), or points for *_pct figures
    points: bool  # change is in percentage points
    beyond_noise: bool

    def to_dict(self) -> dict:
        return {"key": self.key, "a": self.a, "b": self.b, "change": self.change,
                "unit": "points" if self.points else "pct", "beyond_noise": self.beyond_noise}


@dataclass
class Comparison:
    """Two check-ups compared."""

    headline: str  # the step-time key used
    step_change_pct: float | None  # B vs A, percent (negative: B faster)
    noise_pct: float
    cv_a: float | None
    cv_b: float | None
    verdict_a: str | None
    verdict_b: str | None
    figures: list[FigureChange]

    @property
    def step_beyond_noise(self) -> bool:
        return self.step_change_pct is not None and abs(self.step_change_pct) > self.noise_pct

    @property
    def sentence(self) -> str:
        v = (f"verdict unchanged ({self.verdict_a})" if self.verdict_a == self.verdict_b
             else f"verdict {self.verdict_a} -> {self.verdict_b}")
        if self.step_change_pct is None:
            return f"No step time on both sides to compare; {v}."
        c = self.step_change_pct
        if not self.step_beyond_noise:
            return f"Step time {c:+.1f}%: no difference beyond noise ({self.noise_pct:.1f}%); {v}."
        return f"B is {'slower' if c > 0 else 'faster'} than A by {abs(c):.1f}% per step (noise {self.noise_pct:.1f}%); {v}."

    def to_dict(self) -> dict:
        return {"headline": self.headline, "step_change_pct": self.step_change_pct, "noise_pct": self.noise_pct,
                "step_beyond_noise": self.step_beyond_noise, "cv_pct": [self.cv_a, self.cv_b],
                "verdict": [self.verdict_a, self.verdict_b], "sentence": self.sentence,
                "figures": [f.to_dict() for f in self.figures], "noise_k": NOISE_K, "min_noise_pct": MIN_NOISE_PCT}


def figures(report: dict) -> dict[str, float]:
    """The report's numbers by dotted key (see SKIP_PREFIXES)."""
    out: dict[str, float] = {}

    def walk(x, key):
        if key and (key.startswith(SKIP_PREFIXES) or any(w in key for w in SKIP_WORDS)):
            return
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x):
            out[key] = float(x)

    walk(report, "")
    if isinstance(report.get("sync"), dict) and report["sync"].get("recorded") is False:
        out = {k: v for k, v in out.items() if not k.startswith("sync.")}  # not recorded, not zero
    return out


def _get(report: dict, key: str):
    x = report
    for part in key.split("."):
        if not isinstance(x, dict) or part not in x:
            return None
        x = x[part]
    return x


def step_cv(report: dict) -> float | None:
    """The coefficient of variation of the capture's step times, percent (module docstring)."""
    cv = _get(report, "run_figures.steps.cv_pct")
    if cv is not None:
        return float(cv)
    times, steps = _get(report, "step_history.time_ms"), _get(report, "step_history.step")
    if isinstance(times, list) and isinstance(steps, list) and len(times) == len(steps):
        t = np.array([x if isinstance(x, (int, float)) else np.nan for x in times], dtype=float)
        n = np.array([x if isinstance(x, (int, float)) else np.nan for x in steps], dtype=float)
        prof = _get(report, "step_history.profiled")
        if isinstance(prof, list) and len(prof) == 2:
            t = t[~((n >= prof[0]) & (n <= prof[1]))]  # the profiled steps are slower by design
        t = t[np.isfinite(t)]
        t = t[len(t) // 2:]
        if len(t) > 1 and t.mean() > 0:
            return float(100 * t.std() / t.mean())
    cv = _get(report, "steps.cv_pct")
    return float(cv) if cv is not None else None


def compare(a: dict, b: dict) -> Comparison:
    """Every figure of two check-ups side by side, with the noise rule applied."""
    fa, fb = figures(a), figures(b)
    cv_a, cv_b = step_cv(a), step_cv(b)
    noise = max(MIN_NOISE_PCT, NOISE_K * max([c for c in (cv_a, cv_b) if c is not None], default=0.0))
    rows = []
    for key in sorted(set(fa) | set(fb)):
        x, y = fa.get(key), fb.get(key)
        points = key.endswith("_pct")
        if x is None or y is None:
            rows.append(FigureChange(key, x, y, None, points, True))  # present on one side only
            continue
        if points:
            ch = y - x
        elif x != 0:
            ch = 100 * (y / x - 1)
        else:
            ch = 0.0 if y == 0 else float("inf") * np.sign(y)
        rows.append(FigureChange(key, x, y, float(ch), points, bool(abs(ch) > noise)))
    headline = next((k for k in HEADLINES if fa.get(k) and fb.get(k)), HEADLINES[-1])
    step = float(100 * (fb[headline] / fa[headline] - 1)) if fa.get(headline) and fb.get(headline) else None
    va, vb = _get(a, "verdict.primary"), _get(b, "verdict.primary")
    return Comparison(headline, step, float(noise), cv_a, cv_b, va, vb, rows)
