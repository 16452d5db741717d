"""Compare two check-ups (documents of `gpucheckup analyze`, from run directories, traces or JSON, each read
through document.py's types: compare_documents): every figure side by side, its change, and whether the change is
beyond noise.

Definitions (also in docs/metrics.md, "Compare"):
- figures: every number in the report outside the descriptive parts (SKIP_PREFIXES: paths,
  times of day, environment, plot data) and never an identifier (a process, thread, device or stream
  id: is_id), by its dotted key; a check-up that could not record syncs (`sync.recorded` false: a
  light window without --light-syncs) has no `sync.*` figures. Each has a name people read
  (figure_name) and a group (group_of), for the view.
- headline: the step time (docs/metrics.md, "The step time"): the run's unprofiled step
  (`run_figures.steps.unprofiled_ms`, the throughput of its unprofiled steps) when both reports
  have it, else the median of the second half of the unprofiled steps
  (`run_figures.steps.late_median_ms`: runs whose steps never settle), else the window's step
  (`window.step_ms`). change = B / A - 1, percent.
- noise: NOISE_K (2) x the larger coefficient of variation of the two captures' step times
  (`run_figures.steps.cv_pct`, else the cv of the second half of the unprofiled steps in
  `step_history`, else `steps.cv_pct`), at least MIN_NOISE_PCT (1%). Step times moving by their own spread between
  two captures of one job is noise; twice that is not.
- beyond noise: a figure whose relative change exceeds the noise; for percentages (is_pct: a key
  with `pct` in it, and the maps of percentages: kernel categories, verdict scores, each GPU's busy
  share) the change in points is compared with it. A figure on one side only is "new" (B only) or
  "gone" (A only), a change; one that was 0 in A has no relative change: its absolute change is
  given ("from 0"), and any value other than 0 is beyond noise.
- verdict change: `verdict.primary` of A and of B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucheckup.document import Document, flat_report

NOISE_K = 2.0
MIN_NOISE_PCT = 1.0
SKIP_PREFIXES = ("gpucheckup_version", "trace.", "run.", "env.", "timeline.", "gaps.histogram.", "nvml.",
                 "step_history.", "plots.", "perfetto.")
SKIP_WORDS = ("epoch", "base_time", "_us_at", "hostname")
ID_NAMES = {"id", "pid", "tid", "rank", "device", "stream", "correlation", "external_id"}  # a key's last part
PCT_MAPS = ("kernels.categories.", "verdict.scores.", "gpu.devices.")  # maps whose values are percentages
GROUPS = {  # a key's first part (the second under run_figures) -> the group people read; in this order
    "verdict": "Verdict scores (% of step)", "steps": "Step time (profiled window)", "window": "Profiled window",
    "gpu": "GPU busy", "labels": "Where the step goes (% of step)", "gaps": "GPU idle gaps",
    "dataloader": "DataLoader", "sync": "Synchronizations", "copies": "Copies", "communication": "Communication",
    "kernels": "Kernels", "cuda_api": "CUDA API", "mfu": "MFU", "roofline": "Roofline", "cpu": "Host CPU (trace)",
    "run_figures.steps": "Step time (steps.csv)", "run_figures.cpu": "Host CPU (sampled)",
    "run_figures.dataloaders": "DataLoaders (settings)", "run_figures.nvml": "GPU telemetry (NVML)",
}
UNITS = ("ms", "us", "mb", "gb", "s", "gbps")  # said last: "pageable_ms_per_step" -> "pageable per step (ms)"
WORDS = {"ms": "(ms)", "us": "(us)", "pct": "%", "mb": "(MB)", "gb": "(GB)", "s": "(s)", "gbps": "(GB/s)",
         "tflops": "TFLOPS", "mfu": "MFU", "flops": "FLOPs", "gemm": "GEMM", "cv": "variation", "gpu": "GPU",
         "cpu": "CPU", "api": "API",
         "by_cause_ms": "idle by cause (ms)", "per_step_ms": "per step (ms)", "pct_of_step": "% of step",
         "categories": "% of kernel time", "categories_ms": "kernel time (ms)", "by_direction": "",
         "HtoD": "host to device", "DtoH": "device to host", "DtoD": "device to device"}
NAMES = {  # the figures people read first, by their own words
    "steps.median_ms": "median step (ms)", "window.step_ms": "step (ms)", "gpu.busy_pct": "GPU busy %",
    "run_figures.steps.unprofiled_ms": "unprofiled step (ms)", "run_figures.steps.late_median_ms":
    "median step, second half (ms)", "run_figures.steps.steady_median_ms": "steady median step (ms)",
    "run_figures.steps.cv_pct": "step variation %", "steps.cv_pct": "step variation %", "mfu.pct": "MFU %",
    "dataloader.pct_of_step": "waiting for data, % of step", "dataloader.ms_per_step": "waiting for data per step (ms)",
    "sync.blocked_ms_per_step": "host blocked per step (ms)", "copies.per_step_ms": "copy time per step (ms)",
    "communication.exposed_ms_per_step": "exposed per step (ms)", "kernels.total_ms": "kernel time (ms)",
    "mfu.shape_flops.flops_per_step": "FLOPs per step, shapes summed", "mfu.step_s": "step used for MFU (s)",
}
MAP_NAMES = {  # a map's key prefix -> its entries' name, {x} the entry's own key in words
    "verdict.scores.": "{x}", "labels.": "{x}", "gpu.devices.": "GPU {x} busy %",
    "gaps.by_cause_ms.": "{x}: idle in window (ms)", "gaps.per_step_ms.": "{x}: idle per step (ms)",
    "gaps.pct_of_step.": "{x}: idle, % of step", "kernels.categories.": "{x}: % of kernel time",
    "kernels.categories_ms.": "{x}: kernel time (ms)", "copies.by_direction.": "{x}",
    "mfu.shape_flops.by_kind.": "{x}: FLOPs per step (shapes)", "mfu.gemm_dtypes_pct.": "{x}: % of GEMM FLOPs",
    "mfu.gpu.tflops.": "peak {x} TFLOPS", "mfu.estimates.": "FLOPs per step, from {x}",
}
HEADLINES = ("run_figures.steps.unprofiled_ms", "run_figures.steps.late_median_ms", "window.step_ms")


def is_id(key: str) -> bool:
    """Whether the key names an identifier (a process, thread, device or stream), not a figure."""
    last = key.rsplit(".", 1)[-1]
    return last in ID_NAMES or last.endswith(("_id", "_pid", "_tid"))


def is_pct(key: str) -> bool:
    """Whether the figure is a percentage (its change is in points)."""
    return "pct" in key or key.startswith(PCT_MAPS)


def group_of(key: str) -> str:
    """The group the figure is shown in."""
    parts = key.split(".")
    two = ".".join(parts[:2])
    return GROUPS.get(two) or GROUPS.get(parts[0]) or (two if parts[0] == "run_figures" else parts[0]).replace("_", " ")


def figure_name(key: str) -> str:
    """The figure's name inside its group, in words (NAMES, else its key's parts with WORDS' words)."""
    if key in NAMES:
        return NAMES[key]
    prefix = next((m for m in MAP_NAMES if key.startswith(m)), None)
    if prefix is not None:
        return MAP_NAMES[prefix].format(x=_words(key[len(prefix):].split(".")))
    parts = key.split(".")
    parts = parts[2:] if parts[0] == "run_figures" else parts[1:]
    return _words(parts or [key]) or key


def _words(parts: list[str]) -> str:
    """Key parts in words: WORDS' words for the abbreviations, spaces for underscores, a unit last."""
    words = []
    for part in parts:
        if part in WORDS:
            words.append(WORDS[part])
            continue
        bits = part.replace("gb_per_s", "gbps").replace("gb_s", "gbps").split("_")
        units = [WORDS[b] for b in bits if b in UNITS]
        words.append(" ".join([WORDS.get(b, b) for b in bits if b not in UNITS] + units))
    return " ".join(w for w in words if w).strip()


@dataclass
class FigureChange:
    """One figure in both check-ups."""

    key: str
    a: float | None
    b: float | None
    change: float | None  # percent (relative), points for percentages, the absolute change when A was 0
    points: bool  # change is in percentage points
    beyond_noise: bool
    status: str = "changed"  # "changed", "new" (B only), "gone" (A only), "from 0" (A was 0: change is absolute)

    @property
    def name(self) -> str:
        return figure_name(self.key)

    @property
    def group(self) -> str:
        return group_of(self.key)

    def to_dict(self) -> dict:
        unit = "points" if self.points else "absolute" if self.status == "from 0" else "pct"
        return {"key": self.key, "name": self.name, "group": self.group, "a": self.a, "b": self.b,
                "change": self.change, "unit": unit, "status": self.status, "beyond_noise": self.beyond_noise}


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

    def shown(self, everything: bool = False) -> list[FigureChange]:
        """The figures a reader is shown: those beyond noise (every one with `everything`), grouped in GROUPS'
        order, each group's figures in key order."""
        names = list(GROUPS.values())
        rank = {g: (names.index(g) if g in names else len(names), g) for g in {f.group for f in self.figures}}
        return sorted((f for f in self.figures if everything or f.beyond_noise), key=lambda f: (rank[f.group], f.key))

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
        if key and (key.startswith(SKIP_PREFIXES) or any(w in key for w in SKIP_WORDS) or is_id(key)):
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
        points = is_pct(key)
        if x is None or y is None:  # present on one side only
            rows.append(FigureChange(key, x, y, None, points, True, "new" if x is None else "gone"))
            continue
        if points:
            ch = y - x
        elif x != 0 or y == 0:
            ch = 100 * (y / x - 1) if x != 0 else 0.0
        else:  # no relative change from 0: the absolute one
            rows.append(FigureChange(key, x, y, float(y), points, y != 0, "from 0"))
            continue
        rows.append(FigureChange(key, x, y, float(ch), points, bool(abs(ch) > noise)))
    headline = next((k for k in HEADLINES if fa.get(k) and fb.get(k)), HEADLINES[-1])
    step = float(100 * (fb[headline] / fa[headline] - 1)) if fa.get(headline) and fb.get(headline) else None
    va, vb = _get(a, "verdict.primary"), _get(b, "verdict.primary")
    return Comparison(headline, step, float(noise), cv_a, cv_b, va, vb, rows)


def compare_documents(a: Document, b: Document) -> Comparison:
    """Two check-up documents compared: each one's first check-up (its trace's report with its run's run-level keys;
    a run without a trace, the run's), read through the same types whether checked up now or loaded from JSON."""
    return compare(flat_report(a), flat_report(b))
