"""The run-level parts of the report dict (`gpucheckup analyze RUN_DIR`, `gpucheckup run`).

Keys added beside the trace's keys (see checkup/trace_report.py), also in docs/capture.md:
- run: path, kind, command, exit_code, exit_signal, started_epoch_s, duration_s, captured, failed,
  traces (the traces checked up), no_gpu_timeline (why there is none, or null)
- nvml: {"t_s", "gpu_util", "power_w", "sm_clock_mhz", "throttled"}: seconds since the run started,
  the job's GPUs' mean utilization %, summed power W, mean SM clock MHz, 1 when throttled
  (at most 2000 points: equal time buckets above that)
- step_history: {"step": [...], "time_ms": [...], "profiled": [first, last] or null, "source": "steps.csv"}:
  every timed step of the process whose steps speak for the run (at most 5000 points: bucket
  medians above that), the profiled steps, and the file they come from (the shape the HTML and
  Markdown reports render, docs/reports.md)
- env: env.json as written by `gpucheckup run`
- run_figures: {"steps": step_history.step_stats, "nvml": telemetry.nvml_summary,
  "cpu": telemetry.cpu_summary, "dataloaders": environment.dataloader_load, "flops": flops.json}
A run with no GPU timeline gets a report of these keys plus verdict.findings and fixes from
the run-level rules, with verdict.primary = null; an out-of-process attach whose samples name a
bound (diagnosis/coarse.py) gets that verdict instead, with `verdict.coarse` saying what it rests on,
and the coarse finding's fixes with `predicted_note` saying why their saving is a share, not replayed.
"""

from __future__ import annotations

from gpucheckup import __version__
from gpucheckup.analysis.run_logs import step_history, telemetry
from gpucheckup.analysis.run_logs.run import RunAnalysis
from gpucheckup.diagnosis.coarse import TIMELINE_HINT
from gpucheckup.diagnosis.findings import Diagnosis, Finding
from gpucheckup.checkup.trace_report import _clean
from gpucheckup.checkup.trace_report import fix_dicts as model_fix_dicts

MAX_ENV_TEXT = 20000


def run_parts(ra: RunAnalysis, traces: list[str], no_timeline: str | None, coarse: dict | None = None,
              figures: dict | None = None) -> dict:
    """The run-level keys of the report dict (`coarse`: diagnosis/coarse.py's verdict of py-spy samples; `figures`:
    this report's own run figures after the run's, e.g. its trace's sampled host states as `host_samples`)."""
    run = ra.run
    m = run.manifest
    t0 = m.get("started_epoch_s") or 0.0
    env = dict(run.env)
    if isinstance(env.get("topology"), str) and len(env["topology"]) > MAX_ENV_TEXT:
        env["topology"] = env["topology"][:MAX_ENV_TEXT] + "..."
    out = {
        "run": {
            "path": str(run.path),
            "kind": run.kind,
            "command": m.get("command"),
            "exit_code": m.get("exit_code"),
            "exit_signal": m.get("exit_signal"),
            "started_epoch_s": m.get("started_epoch_s"),
            "duration_s": m.get("duration_s"),
            "captured": m.get("captured", {}),
            "failed": m.get("failed", {}),
            "traces": traces,
            "no_gpu_timeline": no_timeline,
            "steps_from": ra.steps_key,
        },
        "nvml": telemetry.nvml_plot_series(run.nvml, t0) if ra.nvml else
        {"t_s": [], "gpu_util": [], "power_w": [], "sm_clock_mhz": [], "throttled": []},
        "step_history": step_history_part(ra),
        "env": env,
        "run_figures": {"steps": ra.steps, "nvml": ra.nvml, "cpu": ra.cpu, "dataloaders": ra.loaders,
                        "flops": run.flops, "coarse": coarse},
    }
    out = _clean(out)
    out["run_figures"].update(figures or {})
    return out


def step_history_part(ra: RunAnalysis) -> dict:
    """The report's step_history: every timed step of the run, the profiled steps, the file they come from."""
    key = ra.steps_key
    if key is None:
        return {"step": [], "time_ms": [], "profiled": None, "source": None}
    return {**step_history.history_series(ra.run.steps[key]),
            "profiled": (ra.steps or {}).get("profiled_steps"),
            "source": "steps.csv" if key == "main" else f"steps-{key}.csv"}


def run_only_dict(ra: RunAnalysis, findings: list[Finding], no_timeline: str, traces: list[str],
                  coarse: dict | None = None, figures: dict | None = None, notes: list[str] = ()) -> dict:
    """A report for a run with no GPU timeline: the run-level parts and findings (`figures`: run_parts'; `notes`:
    the run's, after the one saying why there is no timeline)."""
    out = {
        "gpucheckup_version": __version__,
        "verdict": {"primary": None, "title": "No GPU timeline", "reason": no_timeline, "scores": {},
                    "findings": [f.to_dict() for f in findings]},
        "fixes": fix_dicts(findings),
        "notes": [no_timeline, *notes],
    }
    return {**_clean(out), **run_parts(ra, traces, no_timeline, coarse, figures)}


def coarse_dict(ra: RunAnalysis, findings: list[Finding], cv, note: str, no_timeline: str | None,
                traces: list[str], notes: list[str] = ()) -> dict:
    """A report for an out-of-process attach whose samples name a bound (cv: diagnosis/coarse.py's CoarseVerdict):
    its verdict marked coarse, the run-level and coarse findings, the fixes (each coarse one with `note`), the
    run's `notes` after the coarse one."""
    found = [f.to_dict() for f in findings]
    fixes = fix_dicts(findings)
    for fx in fixes + [fx for f in found if f["id"].startswith("coarse_") for fx in f["fix"]]:
        if (fx.get("finding") or "coarse_").startswith("coarse_"):  # none: inside the coarse finding
            fx.update(saving_ms=None, predicted_note=note)
    out = {
        "gpucheckup_version": __version__,
        "verdict": {"primary": cv.verdict, "title": cv.title, "reason": f"{cv.sentence} ({cv.basis})", "scores": {},
                    "findings": found, "coarse": cv.basis},
        "fixes": fixes,
        "notes": [f"the verdict is coarse ({cv.basis}); {TIMELINE_HINT}", *notes],
        **run_parts(ra, traces, no_timeline, cv.to_dict()),
    }
    return _clean(out)


def fix_dicts(findings: list[Finding]) -> list[dict]:
    """The report's `fixes` from findings, ranked as in every check-up (Diagnosis.ranked_fixes: info findings
    skipped, one fix per key with its largest saving, configuration-only first, then by saving)."""
    return model_fix_dicts(Diagnosis(primary=None, reason="", scores={}, findings=findings))
