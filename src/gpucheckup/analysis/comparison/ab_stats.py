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
- verdict, one rule: B is faster (slower) when the change's interval lies wholly below (above)
  zero; when the interval holds zero, no difference was measured. The noise is said beside it and
  never overrides it: when the rounds of one side moved by more than the change, the sentence adds
  that more rounds would narrow the interval (the interval already counts the rounds' spread, since
  it resamples them).
- clock: the step times are the host's (the interval between optimizer steps' returns) unless a
  side ran ahead of its GPU: then both sides' GPU step times are used (the time between CUDA
  events recorded at each step's end, the agent's gpu-steps.csv), and when a side has none the
  comparison is refused. Over a round's measured steps the host intervals sum to H and the GPU
  intervals to G; G - H is how much the queue of work the host had launched but the GPU had not
  done grew over them (both sums telescope to end minus start). A side ran ahead when, in one of
  its rounds, that growth is more than RUN_AHEAD_SHARE of G: its host-side intervals measure how
  fast it queues work, not how fast steps are done. In a job that waits for its GPU, or one
  the GPU waits for, the queue stays bounded and G = H up to the ends' jitter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from gpucheckup.analysis.distinct import median

CONFIDENCE = 0.95
BOOTSTRAP = 2000
SEED = 0  # the resampling is seeded: the same step times always give the same sentence
MIN_ROUNDS = 2
MIN_STEPS = 3  # measured steps a round needs
# the queue's growth over a round, as a share of the GPU's time, above which a side ran ahead of its GPU: a job
# that keeps pace differs only by the ends' jitter (one step's variation over 50-100 steps: a few percent at most)
RUN_AHEAD_SHARE = 0.10
RULE = (f"B differs from A when the {CONFIDENCE:.0%} interval of the change excludes 0: faster when it lies below 0, "
        "slower when above")


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
    clock: str = "host"  # whose step times: "host" or "gpu" (module docstring, clock)
    ahead: list = field(default_factory=list)  # RunAhead of each side that ran ahead of its GPU
    notes: list[str] = field(default_factory=list)  # what the measurement lacked (fewer steps than asked)

    @property
    def confidence(self) -> float:
        """The interval's confidence (CONFIDENCE)."""
        return CONFIDENCE

    @property
    def sentence(self) -> str:
        a, b = self.a.label, self.b.label
        ci = f"{CONFIDENCE:.0%} interval {self.lo_pct:+.1f}% to {self.hi_pct:+.1f}%"
        clock = " on the GPU" if self.clock == "gpu" else ""
        noise = f"noise between rounds {self.noise_pct:.1f}%"
        if self.verdict == "faster":
            out = f"{b} is faster than {a} by {-self.change_pct:.1f}% per step{clock} ({ci}, below 0; {noise})."
        elif self.verdict == "slower":
            out = f"{b} is slower than {a} by {self.change_pct:.1f}% per step{clock} ({ci}, above 0; {noise})."
        else:
            out = (f"No difference measured: {b} vs {a} {self.change_pct:+.1f}% per step{clock} ({ci} holds 0; "
                   f"{noise}).")
        if self.verdict != "same" and self.noise_pct > abs(self.change_pct):
            out += (f" A side's rounds moved by more than the change ({self.noise_pct:.1f}%): more --rounds would "
                    "narrow the interval.")
        return out + "".join(" " + r.sentence for r in self.ahead) + "".join(" " + n for n in self.notes)

    def to_dict(self) -> dict:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "change_pct": self.change_pct,
                "interval_pct": [self.lo_pct, self.hi_pct], "noise_pct": self.noise_pct, "verdict": self.verdict,
                "sentence": self.sentence, "confidence": CONFIDENCE, "bootstrap": BOOTSTRAP, "clock": self.clock,
                "ran_ahead": [asdict(r) for r in self.ahead], "run_ahead_share": RUN_AHEAD_SHARE,
                "rule": RULE, "notes": self.notes}


@dataclass
class RunAhead:
    """A side whose host ran ahead of its GPU: its step times on either clock."""

    label: str
    host_ms: float  # mean host-side step (H / steps) in the round where the queue grew most
    gpu_ms: float  # mean GPU-side step (G / steps) over the same round's steps: share = 1 - host_ms / gpu_ms
    share: float  # the queue's largest growth in a round, as a share of that round's GPU time

    @property
    def sentence(self) -> str:
        return (f"{self.label} ran ahead of its GPU (in its worst round its steps returned every {self.host_ms:.3f} "
                f"ms on average while the GPU took {self.gpu_ms:.3f} ms per step; {100 * self.share:.0f}% of the "
                f"GPU's time was queued, not waited for): both sides are timed on the GPU, between CUDA events at "
                f"each step's end.")


def ran_ahead(label: str, host_rounds: list, gpu_rounds: list | None) -> RunAhead | None:
    """The side's RunAhead when, in one of its rounds, the queue grew by more than RUN_AHEAD_SHARE of the GPU's
    time (module docstring, clock); None when it kept pace or has no GPU step times."""
    if not gpu_rounds:
        return None
    share, worst = 0.0, None
    for h, g in zip(host_rounds, gpu_rounds):
        gs = float(np.sum(g))
        s = max(0.0, 1 - float(np.sum(h)) / gs) if gs > 0 else 0.0
        if worst is None or s > share:
            share, worst = s, (h, g)
    if share <= RUN_AHEAD_SHARE:
        return None
    # the figures the sentence prints are the round's own means, so that they check against its share
    return RunAhead(label, float(np.mean(worst[0])), float(np.mean(worst[1])), share)


def choose_clock(a_label: str, a_host: list, a_gpu: list | None, b_label: str, b_host: list,
                 b_gpu: list | None) -> tuple[list, list, list[RunAhead]]:
    """The step times to compare (module docstring, clock): the host's, or both sides' GPU times when a side ran
    ahead; each side's RunAhead. ValueError when a side ran ahead and the other has no GPU step times."""
    ahead = [r for r in (ran_ahead(a_label, a_host, a_gpu), ran_ahead(b_label, b_host, b_gpu)) if r is not None]
    if not ahead:
        return a_host, b_host, []
    missing = [lab for lab, g in ((a_label, a_gpu), (b_label, b_gpu)) if not g]
    if missing:
        raise ValueError(f"{ahead[0].label} ran ahead of its GPU (steps returned every {ahead[0].host_ms:.3f} ms, "
                         f"the GPU took {ahead[0].gpu_ms:.3f} ms), so its host-side step times are not its "
                         f"throughput, and {missing[0]} has no GPU step times to compare on the GPU's clock: "
                         f"not compared")
    return a_gpu, b_gpu, ahead


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


_QUANTILES = [(1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100]  # the interval's ends, in percent


def _side(label: str, rounds: list[np.ndarray], boot: np.ndarray, samples_per_step: float | None) -> SideStats:
    """One side's figures from its checked rounds and the bootstrap of its median."""
    med = [float(median(r)) for r in rounds]
    lo, hi = np.percentile(boot, _QUANTILES)
    return SideStats(label, med, int(sum(len(r) for r in rounds)), float(median(med)), float(lo), float(hi),
                     samples_per_step)


def side_stats(label: str, rounds: list, samples_per_step: float | None = None) -> SideStats:
    """One side's figures alone (its bootstrap drawn as compare draws side A's): for a report of one command."""
    r = _check(label, rounds)
    return _side(label, r, _boot(r, np.random.default_rng(SEED)), samples_per_step)


def compare(a_rounds: list, b_rounds: list, a_label: str = "A", b_label: str = "B",
            samples_per_step: float | None = None, ahead: list | None = None,
            notes: list[str] | None = None) -> AbResult:
    """Both sides' figures, the change of B vs A with its interval, and the verdict (module docstring); `ahead`:
    choose_clock's sides that ran ahead (the rounds are then GPU step times); `notes`: sentences on what the
    measurement lacked, said after the verdict."""
    ar, br = _check(a_label, a_rounds), _check(b_label, b_rounds)
    rng = np.random.default_rng(SEED)
    ab, bb = _boot(ar, rng), _boot(br, rng)
    a, b = _side(a_label, ar, ab, samples_per_step), _side(b_label, br, bb, samples_per_step)
    change = 100 * (b.median_ms / a.median_ms - 1)
    lo, hi = np.percentile(100 * (bb / ab - 1), _QUANTILES)
    noise = max(a.spread_pct, b.spread_pct)
    verdict = "faster" if hi < 0 else "slower" if lo > 0 else "same"  # RULE
    return AbResult(a, b, change, float(lo), float(hi), noise, verdict, "gpu" if ahead else "host", list(ahead or []),
                    list(notes or []))
