"""What a check-up concludes: findings with evidence and fixes, and the primary verdict."""

from __future__ import annotations

import msgspec

VERDICT_TITLES = {
    "input_bound": "Input-bound: the GPU waits for the DataLoader",
    "launch_bound": "Launch-bound: the CPU cannot issue kernels fast enough",
    "sync_bound": "Sync-bound: host-GPU synchronizations drain the GPU's queue",
    "copy_bound": "Copy-bound: memory copies the GPU waits on",
    "communication_bound": "Communication-bound: collectives not hidden behind compute",
    "gpu_bound": "GPU-bound: the kernels themselves take the time",
    "waiting": "Waiting: this rank waits for a straggler rank at its collectives",  # many GPUs (issue 9)
}
SEVERITIES = ("critical", "warning", "info")
TIERS = ("config", "code", "refactor")  # configuration-only first, then code changes, then refactors
TIER_TITLES = {"config": "configuration only", "code": "code change", "refactor": "refactor"}
# A saving under this prints as 0.00 ms: nothing measurable. Such a fix ranks after every fix that saves more,
# whatever its tier (a configuration change that saves nothing is not the first thing to try).
NO_SAVING_MS = 0.005
# A configuration fix goes before deeper changes only when it saves at least this share of the largest saving on
# offer: on an HF Trainer loop its NaN-filter read saved 0.3% where CUDA graphs saved 47% (docs/validation.md 7e).
CHEAP_FIRST_SHARE = 0.1


class Fix(msgspec.Struct):
    """One thing to try, how deep a change it is, and the most time per step it could save."""

    action: str
    tier: str  # one of TIERS
    saving_ms: float  # upper bound per step, from the finding's measured cost
    how: str = ""
    key: str = ""  # the catalogue key (diagnosis/fixes.py): one change, however many findings offer it
    reason: str = ""  # the saving model and why (the catalogue's `saves`)
    predicted: object | None = None  # diagnosis/savings.py FixPrediction: the replayed saving, when one models it

    def to_dict(self) -> dict:
        """Its fields, the prediction (a diagnosis/savings.py FixPrediction) as a dict too; why the prediction is
        coarse, where it is, as `predicted_note` (the document's key for what qualifies a prediction)."""
        d = msgspec.structs.asdict(self)
        if self.predicted is not None:
            d["predicted"] = msgspec.structs.asdict(self.predicted)
            coarse = d["predicted"].pop("coarse", "")
            d["predicted"].pop("upper_bound", None)  # said in the note
            if coarse:
                d["predicted_note"] = coarse
        return d

    @property
    def expected_ms(self) -> float:
        """The saving to rank by: the replay's prediction when there is one, else the bound."""
        return self.predicted.saving_ms if self.predicted is not None else self.saving_ms


class Event(msgspec.Struct):
    """One event behind a finding: what it is, where it ran, when (ms from the trace's first event, or from
    the run's start for run-level findings) and for how long."""

    name: str
    where: str  # thread, stream or GPU; for run-level findings the file the figure comes from
    start_ms: float
    dur_ms: float
    t_us: float | None = None  # the trace's own clock (for Perfetto marks); None off the trace

    def __post_init__(self):
        """Plain floats whatever computed them (numpy scalars would not encode as JSON)."""
        self.start_ms, self.dur_ms = float(self.start_ms), float(self.dur_ms)
        if self.t_us is not None:
            self.t_us = float(self.t_us)


class Finding(msgspec.Struct):
    """One conclusion: the rule that fired, the numbers behind it, the events that show it, fixes."""

    id: str
    severity: str  # one of SEVERITIES
    title: str
    rule: str  # the metric and threshold, as the rule states them
    cost_ms_per_step: float
    cost_pct_of_step: float
    evidence: list[str] = msgspec.field(default_factory=list)
    events: list[Event] = msgspec.field(default_factory=list)  # where to look: the events behind the finding
    fixes: list[Fix] = msgspec.field(default_factory=list)

    def to_dict(self) -> dict:
        """Its fields as plain dicts and lists (the events and fixes too), `fixes` under the key `fix`."""
        d = msgspec.structs.asdict(self)
        d["evidence"] = list(self.evidence)
        d["events"] = [msgspec.structs.asdict(e) for e in self.events]
        d["fix"] = [f.to_dict() for f in d.pop("fixes")]
        return d


class Diagnosis(msgspec.Struct):
    """The primary verdict, the findings that support or qualify it, and notes on data quality."""

    primary: str  # a key of VERDICT_TITLES
    reason: str
    scores: dict[str, float]  # percent of step time each bound explains
    findings: list[Finding]
    notes: list[str] = msgspec.field(default_factory=list)

    @property
    def title(self) -> str:
        return VERDICT_TITLES[self.primary]

    def ranked_fixes(self, limit: int | None = None) -> list[tuple[Fix, Finding]]:
        """All fixes, configuration-only first, then by the time each saves (predicted, else its bound); a fix that
        saves under CHEAP_FIRST_SHARE of the largest replayed saving (with nothing replayed, of the largest bound:
        every bound is an upper bound, so such a fix's best case is under a tenth of another's) comes after those
        that do, whatever its tier (a cheap change worth a fraction of a percent is not the first to try), and those
        that save nothing measurable (under NO_SAVING_MS) last."""
        best: dict[str, tuple[Fix, Finding]] = {}
        for fd in self.findings:
            if fd.severity == "info":
                continue
            for f in fd.fixes:
                key = f.key or f.action
                if key not in best or f.saving_ms > best[key][0].saving_ms:
                    best[key] = (f, fd)
        replayed = [f.expected_ms for f, _ in best.values() if f.predicted is not None]
        top = max(replayed or [f.expected_ms for f, _ in best.values()], default=0.0)
        pairs = sorted(best.values(), key=lambda p: (
            p[0].expected_ms < NO_SAVING_MS,
            TIERS.index(p[0].tier) if p[0].expected_ms >= CHEAP_FIRST_SHARE * top else len(TIERS),
            -p[0].expected_ms))
        return pairs[:limit] if limit else pairs
