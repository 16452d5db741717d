"""A/B statistics: two configurations' step times over interleaved rounds, and whether they differ.

Definitions (also in docs/metrics.md, "A/B"):
- a round: one process of one side; its figure is the median of its measured steps (the steps
  after the warm-up). A side's step time = the median of its rounds' figures (a slow process
  counts once); throughput = 1000 / step time, steps per second (times samples per step when
  given).
- interval: the CONFIDENCE (95%) percentile interval of a BOOTSTRAP (2000) resampling that draws
  rounds with replacement and, inside each, steps with replacement (the rounds are the
  independent unit: processes differ by more than steps do); the change B vs A gets one from
  the same resamples.
- noise: the larger ratio of slowest to fastest round within one side, minus 1, in percent: how
  much the same configuration moved between its own processes (timings vary by factors, so
  ratios, not differences).
- verdict: B is faster (slower) when the change's interval lies wholly below (above) zero AND
  the ratio of the two sides' step times is larger than that within-side ratio; otherwise "no
  difference beyond noise".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP = 2000
SEED = 0  # the resampling is seeded: the same step times always give the same sentence
MIN_ROUNDS = 2
MIN_STEPS = 3  # measured steps a round needs


@dataclass
class SideStats:
    """One side's figures."""

    label: str
    round_ms: list[float]  # each round's median step
    steps: int  # measured steps over all rounds
    median_ms: float
    lo_ms: float
    hi_ms: float
    samples_per_step: float | None = None

    @property
    def per_s(self) -> float:
        """Throughput: steps (or samples) per second."""
        return (self.samples_per_step or 1.0) * 1000.0 / self.median_ms if self.median_ms > 0 else 0.0

    @property
    def spread_pct(self) -> float:
        """Slowest round over fastest round, minus 1, percent."""
        lo = min(self.round_ms)
        return 100 * (max(self.round_ms) / lo - 1) if lo > 0 else float("inf")

    def to_dict(self) -> dict:
        return {"label": self.label, "round_ms": self.round_ms, "steps": self.steps, "median_ms": self.median_ms,
                "interval_ms": [self.lo_ms, self.hi_ms], "per_s": self.per_s, "spread_pct": self.spread_pct,
                "samples_per_step": self.samples_per_step}


@dataclass
class AbResult:
    """The comparison of B against A."""

    a: SideStats
    b: SideStats
    change_pct: float  # B's step time vs A's, percent (negative: B is faster)
    lo_pct: float
    hi_pct: float
    noise_pct: float
    verdict: str  # "faster", "slower" or "same" (B relative to A)

    @property
    def sentence(self) -> str:
        a, b = self.a.label, self.b.label
        ci = f"{CONFIDENCE:.0%} interval {self.lo_pct:+.1f}% to {self.hi_pct:+.1f}%"
        if self.verdict == "faster":
            return (f"{b} is faster than {a} by {-self.change_pct:.1f}% per step ({ci}; noise between rounds "
                    f"{self.noise_pct:.1f}%).")
        if self.verdict == "slower":
            return (f"{b} is slower than {a} by {self.change_pct:.1f}% per step ({ci}; noise between rounds "
                    f"{self.noise_pct:.1f}%).")
        return (f"No difference beyond noise: {b} vs {a} {self.change_pct:+.1f}% per step ({ci}; noise between "
                f"rounds {self.noise_pct:.1f}%).")

    def to_dict(self) -> dict:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "change_pct": self.change_pct,
                "interval_pct": [self.lo_pct, self.hi_pct], "noise_pct": self.noise_pct, "verdict": self.verdict,
                "sentence": self.sentence, "confidence": CONFIDENCE, "bootstrap": BOOTSTRAP}


def _boot(rounds: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """BOOTSTRAP resampled side medians: rounds drawn with replacement, steps within each."""
    per_round = np.empty((len(rounds), BOOTSTRAP))
    for i, r in enumerate(rounds):
        idx = rng.integers(0, len(r), size=(BOOTSTRAP, len(r)))
        per_round[i] = np.median(r[idx], axis=1)
    pick = rng.integers(0, len(rounds), size=(BOOTSTRAP, len(rounds)))
    return np.median(per_round[pick, np.arange(BOOTSTRAP)[:, None]], axis=1)


def _check(label: str, rounds: list) -> list[np.ndarray]:
    out = [np.asarray(r, dtype=float) for r in rounds]
    out = [r[np.isfinite(r)] for r in out]
    if len(out) < MIN_ROUNDS:
        raise ValueError(f"{label}: {len(out)} rounds; at least {MIN_ROUNDS} are needed")
    short = [len(r) for r in out if len(r) < MIN_STEPS]
    if short:
        raise ValueError(f"{label}: a round has {short[0]} measured steps; at least {MIN_STEPS} are needed")
    return out


def compare(a_rounds: list, b_rounds: list, a_label: str = "A", b_label: str = "B",
            samples_per_step: float | None = None) -> AbResult:
    """Both sides' figures, the change of B vs A with its interval, and the verdict (module docstring)."""
    ar, br = _check(a_label, a_rounds), _check(b_label, b_rounds)
    rng = np.random.default_rng(SEED)
    ab, bb = _boot(ar, rng), _boot(br, rng)
    q = [(1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100]

    def side(label, rounds, boot):
        med = [float(np.median(r)) for r in rounds]
        lo, hi = np.percentile(boot, q)
        return SideStats(label, med, int(sum(len(r) for r in rounds)), float(np.median(med)), float(lo), float(hi),
                         samples_per_step)

    a, b = side(a_label, ar, ab), side(b_label, br, bb)
    change = 100 * (b.median_ms / a.median_ms - 1)
    lo, hi = np.percentile(100 * (bb / ab - 1), q)
    noise = max(a.spread_pct, b.spread_pct)
    ratio = b.median_ms / a.median_ms  # B's time per step in A's
    verdict = "same"
    if hi < 0 and 1 / ratio > 1 + noise / 100:
        verdict = "faster"
    elif lo > 0 and ratio > 1 + noise / 100:
        verdict = "slower"
    return AbResult(a, b, change, float(lo), float(hi), noise, verdict)
