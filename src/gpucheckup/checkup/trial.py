"""`gpucheckup try FIX -- CMD`: a configuration fix applied by the agent, measured against the prediction.

The command runs the job's command again, as it is and with each fix, so it says that first (side_effects):

1. the base check-up: one `gpucheckup run` of the command (the profiled window and the check-up). Its fixes
   give the predicted saving of each fix (diagnosis/fixes.py), the DataLoader worker count the advice names,
   and, when no FIX is given, the configuration fixes to try (PROPOSED: those the agent can apply).
2. the rounds, `ab`'s protocol (checkup/ab.py; its statistics and one decision rule, analysis/comparison/
   ab_stats.py): each process on its own, step times only; base, fix 1, fix 2, ... in turn, `rounds` times; the
   warm-up steps dropped. A fix process carries GPUCHECKUP_TRY (the agent's trial patches, capture/agent/
   trial.py) and the variables of environment-only fixes; every process GPUCHECKUP_MAX_STEPS when --max-steps
   is given (the agent ends the job cleanly after that many optimizer steps).
3. per fix: what the agent applied and where (its trial.json), the measured saving and its interval against
   the base's rounds, the prediction beside it. A fix that applied nowhere is not measured further; a fix that
   broke the job is reported with the job's exit status; a base that fails ends the trial with its status.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpucheckup import __version__
from gpucheckup.capture import launcher
from gpucheckup.capture.agent.settings import SETTINGS
from gpucheckup.capture.agent.trial import ENV_FIXES, ENV_TRY, FIXES, alloc_conf, usable_cores
from gpucheckup.capture.options import RunOptions
from gpucheckup.checkup import ab
from gpucheckup.checkup.ab import Side
from gpucheckup.checkup.assemble import document
from gpucheckup.checkup.pipeline import Checkups, check_run
from gpucheckup.diagnosis.fixes import BY_KEY, advised_workers
from gpucheckup.document import SCHEMA_VERSION, AbSide, Trial, TryCheckup, TryDocument
from gpucheckup.errors import CheckupError


def side_effects(checkup_run: bool) -> str:
    """What a trial runs, said first: the command again, once more for the check-up when it runs one."""
    first = "once for the check-up, then " if checkup_run else ""
    return (f"gpucheckup try runs your command again: {first}the base and each fix in turn for every round, each a "
            "whole process with all its side effects (files and checkpoints it writes, what it logs or sends).")


# the check-up's fixes the agent can apply, and the trial that applies each
PROPOSED = {"dataloader_workers": "dataloader_workers", "more_workers": "dataloader_workers",
            "pin_memory": "pin_memory", "fused_optimizer": "fused_optimizer", "tf32": "tf32",
            "cudnn_benchmark": "cudnn_benchmark", "expandable_segments": "expandable_segments",
            "cpu_threads": "cpu_threads"}
# the catalogue's fixes whose predicted saving a trial's one fix is measured against, the first offered
PREDICTED_BY = {"dataloader_workers": ("dataloader_workers", "more_workers"), "prefetch_factor": ("more_workers",),
                "persistent_workers": ("more_workers",), "pin_memory": ("pin_memory",),
                "fused_optimizer": ("fused_optimizer",), "tf32": ("tf32",), "cudnn_benchmark": ("cudnn_benchmark",),
                "expandable_segments": ("expandable_segments",), "cpu_threads": ("cpu_threads",)}
MIN_CHECKUP_WINDOW = 3  # steps the base check-up's profiled window needs before --max-steps ends the job


@dataclass
class TrialSpec:
    """One trial: its name, the agent's fixes (GPUCHECKUP_TRY) and the environment of environment-only fixes."""

    name: str
    keys: list[str]
    agent: str = ""
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    """What one trial's processes gave: the agent's records, the measured rounds, or why it stopped."""

    spec: TrialSpec
    records: list[dict] = field(default_factory=list)
    rounds: list = field(default_factory=list)
    exit_code: int | None = None
    log: str = ""
    stopped: str = ""  # why it was not measured further


class BaseFailed(Exception):
    """The base command itself failed: its exit status passes through."""

    def __init__(self, rc: int, where: str):
        super().__init__(f"the command as it is exited with status {rc}; its output: {where}")
        self.rc = rc


def parse(text: str) -> list[TrialSpec]:
    """Trials from `FIX[,FIX...]`: each FIX one trial; `a+b` applies both in one trial. CheckupError for a name the
    agent does not know."""
    out = []
    for name in [t.strip() for t in text.split(",") if t.strip()]:
        keys = []
        for part in name.split("+"):
            key = part.split("=", 1)[0].strip() if not part.startswith("env:") else "env"
            if key not in FIXES:
                raise CheckupError(f"no trial fix {key!r}: the agent applies {', '.join(FIXES)} (env:NAME=VALUE)")
            if key == "env" and "=" not in part[4:]:
                raise CheckupError(f"{part!r}: an environment trial is env:NAME=VALUE")
            value = part.split("=", 1)[1] if "=" in part and key != "env" else ""
            if value and not value.isdigit():
                raise CheckupError(f"{part!r}: {key} takes a count (e.g. {key}=8)")
            keys.append(part.strip())
        out.append(TrialSpec(name, keys))
    if not out:
        raise CheckupError("no fix named: gpucheckup try FIX[,FIX...] -- CMD (or no FIX: the check-up's)")
    return out


def resolve(spec: TrialSpec, workers: int | None) -> TrialSpec:
    """The trial with its counts filled in (dataloader_workers: the advice's workers up to the usable cores;
    cpu_threads: the usable cores) and its environment set; its name says the counts."""
    parts, env = [], {}
    for part in spec.keys:
        key = part.split("=", 1)[0] if not part.startswith("env:") else "env"
        if key == "dataloader_workers" and "=" not in part:
            part = f"dataloader_workers={min(workers or usable_cores(), usable_cores())}"
        elif key == "cpu_threads" and "=" not in part:
            part = f"cpu_threads={usable_cores()}"
        if key == "expandable_segments":
            var, conf = alloc_conf(os.environ)
            env[var] = ",".join([c for c in conf.split(",") if c and not c.startswith("expandable_segments")]
                                + ["expandable_segments:True"])
        elif key == "cpu_threads":
            env["OMP_NUM_THREADS"] = part.split("=", 1)[1]
        elif key == "env":
            name, _, value = part[4:].partition("=")
            env[name] = value
        parts.append(part)
    agent = "+".join(parts)
    return TrialSpec(agent, [p.split("=", 1)[0] if not p.startswith("env:") else p for p in parts], agent, env)


# ---- the base check-up ---------------------------------------------------------------------------

def base_checkup(cmd: list[str], out: Path, max_steps: int | None) -> Path:
    """Run the command once as `gpucheckup run` does (its profiled window fitted under --max-steps); its run
    directory. BaseFailed when the job fails."""
    skip = steps = None
    if max_steps:
        steps = max(1, min(SETTINGS["steps"][1], max_steps // 4))
        skip = max(2, min(SETTINGS["skip"][1], max_steps - steps - 1))
    job = launcher.run_job(list(cmd), RunOptions(out=out, name="checkup", skip=skip, steps=steps, max_steps=max_steps))
    if not job.started or job.returncode != 0:
        raise BaseFailed(job.returncode, str(job.run_dir))
    return job.run_dir


@dataclass
class Predictions:
    """What the base check-up says: its verdict, step, fixes by key (their saving in percent) and the workers."""

    checkup: TryCheckup | None
    pct: dict[str, float | None] = field(default_factory=dict)
    proposed: list[str] = field(default_factory=list)  # catalogue keys of its configuration fixes, ranked
    workers: int | None = None
    note: str = ""  # why there are none, when the check-up failed


def predictions(run_dir: Path | None) -> Predictions:
    """The base check-up's predictions (none without a run directory, or when it cannot be checked up)."""
    if run_dir is None:
        return Predictions(None)
    try:
        result = check_run(run_dir)
    except Exception as e:  # noqa: BLE001 - the fixes are still measured, without a prediction
        return Predictions(None, note=f"No predictions: the base run could not be checked up ({e}).")
    doc = document(result)
    step = doc.step.ms if doc.step else None
    pct: dict[str, float | None] = {}
    for f in doc.fixes:
        if f.key in pct:
            continue
        if f.predicted is not None and f.predicted.saving_pct is not None:
            pct[f.key] = f.predicted.saving_pct
        elif BY_KEY.get(f.key) and BY_KEY[f.key].saves.startswith("not predicted"):
            pct[f.key] = None
        else:
            pct[f.key] = 100 * f.saving_ms / step if step and f.saving_ms is not None else None
    proposed = [f.key for f in doc.fixes if f.key in PROPOSED]
    return Predictions(TryCheckup(str(run_dir), doc.verdict.primary, step), pct, proposed, _workers(result))


def _workers(result: Checkups) -> int | None:
    """The workers the advice names for the check-up's traces (the most any asks for)."""
    got = [advised_workers(c.analysis) for c in result.checkups if c.analysis is not None]
    got += [advised_workers(c.profile) for c in result.cpu]
    got = [n for n in got if n]
    return max(got) if got else None


# ---- the rounds ----------------------------------------------------------------------------------

def run_rounds(cmd: list[str], trials: list[TrialSpec], rounds: int, warmup: int, measure: int,
               max_steps: int | None, out: Path, progress=None) -> tuple[list, list[Outcome]]:
    """Base, each trial, in turn, `rounds` times; the base's measured rounds and each trial's outcome."""
    common = {SETTINGS["max_steps"][0]: str(max_steps)} if max_steps else {}
    base = Side("base", list(cmd), dict(common))
    outcomes = [Outcome(t) for t in trials]
    sides = [Side(t.name, list(cmd), {**common, ENV_TRY: t.agent, **t.env}) for t in trials]
    base_rounds = []
    for r in range(1, rounds + 1):
        run_dir, rc, log = ab.run_process(base, out, r)
        if rc != 0:
            raise BaseFailed(rc, str(log))
        base_rounds.append(ab.measured(base, run_dir, log, warmup, measure))
        if progress:
            progress(base, r)
        for side, o in zip(sides, outcomes):
            if o.stopped:
                continue
            run_dir, rc, log = ab.run_process(side, out, r)
            o.records = merge(o.records, read_records(run_dir))
            if rc != 0:
                o.exit_code, o.log, o.stopped = rc, str(log), f"the job exited with status {rc} (its output: {log})"
            elif not _any_applied(o):
                o.stopped = "applied nowhere in the job"
            else:
                try:
                    o.rounds.append(ab.measured(side, run_dir, log, warmup, measure))
                except CheckupError as e:
                    o.stopped = str(e)
            if progress:
                progress(side, r)
    return base_rounds, outcomes


def _any_applied(o: Outcome) -> bool:
    """Whether the agent applied a fix of the trial somewhere; with no record at all, an environment-only trial
    counts as applied (its variables were set before the job started; the agent reports them at the first step)."""
    if o.records:
        return any(r["applied"] for r in o.records)
    return all(k.split(":")[0] in ENV_FIXES for k in o.spec.keys)


def read_records(run_dir: Path) -> list[dict]:
    """The agent's trial records of every process of one run directory (trial.json, trial-rank<R>.json)."""
    out: list[dict] = []
    for path in sorted(Path(run_dir).glob("trial*.json")):
        try:
            got = json.loads(path.read_text()).get("fixes") or []
        except (OSError, ValueError, AttributeError):
            continue
        out = merge(out, [r for r in got if isinstance(r, dict) and {"fix", "applied", "how"} <= r.keys()])
    return out


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """Records in order, each once."""
    return old + [r for r in new if r not in old]


# ---- the result ----------------------------------------------------------------------------------

def side_of(stats) -> AbSide:
    """A side's figures (ab_stats.SideStats) as the document's type."""
    return msgspec.convert(stats.to_dict(), AbSide)


def trial_row(o: Outcome, base, base_rounds: list, pred: Predictions, warmup: int, measure: int) -> Trial:
    """One trial's row: applied where, predicted, measured, the verdict and its sentence."""
    keys = [k.split(":")[0] if not k.startswith("env:") else k for k in o.spec.keys]
    by_key = {k: [r for r in o.records if r["fix"] == k] for k in keys}
    applied = all(any(r["applied"] for r in recs) for recs in by_key.values())
    how = "; ".join(dict.fromkeys(r["how"] for r in o.records)) or "the agent said nothing (no trial.json)"
    predicted, predicted_from = _predicted(keys, pred, o.spec.name)
    row = dict(fix=o.spec.name, applied=applied, how=how, predicted_saving_pct=predicted,
               predicted_from=predicted_from, measured_saving_pct=None, interval_pct=None, rounds=len(o.rounds),
               exit_code=o.exit_code)
    if o.exit_code is not None:
        return Trial(**row, verdict="failed", sentence=f"{o.spec.name} broke the job: it exited with status "
                                                       f"{o.exit_code} (the base did not); its output: {o.log}")
    if not _any_applied(o):
        return Trial(**row, verdict="not applied", sentence=f"{o.spec.name} was not measured: the agent applied it "
                                                            "nowhere in the job")
    if len(o.rounds) < len(base_rounds) or len(o.rounds) < 2:
        return Trial(**row, verdict="not measured", sentence=f"{o.spec.name} was not measured: {o.stopped}")
    side = Side(o.spec.name, [])
    try:
        res = ab.compare(base, side, base_rounds, o.rounds, None, warmup, measure)
    except CheckupError as e:
        return Trial(**row, verdict="not measured", sentence=f"{o.spec.name} was not measured: {e}")
    row.update(measured_saving_pct=-res.change_pct, interval_pct=[-res.hi_pct, -res.lo_pct])
    verdict = "no difference" if res.verdict == "same" else res.verdict
    said = f"Predicted by the check-up: {predicted:.1f}% ({predicted_from})." if predicted is not None else \
        f"No prediction: {predicted_from}."
    return Trial(**row, verdict=verdict, sentence=f"{res.sentence} {said}", step=side_of(res.b),
                 noise_pct=res.noise_pct, clock=res.clock)


def _predicted(keys: list[str], pred: Predictions, spec_name: str = "") -> tuple[float | None, str]:
    """The check-up's predicted saving of a trial (one fix's; a trial of several has none) and where it is from."""
    if pred.checkup is None:
        return None, "no base check-up"
    if len(keys) != 1:
        return None, "a trial of several fixes has no single prediction"
    cat = next((c for c in PREDICTED_BY.get(keys[0], ()) if c in pred.pct), None)
    if cat is None:
        return None, "the check-up did not offer this fix"
    if pred.pct[cat] is None:
        return None, f"the check-up does not predict {cat} ({BY_KEY[cat].saves})"
    asked = keys_value(keys[0], spec_name)
    if cat in ("dataloader_workers", "more_workers") and pred.workers and asked and asked != pred.workers:
        return pred.pct[cat], (f"the check-up's {cat} fix, for the {pred.workers} workers that keep pace (this trial "
                               f"has {asked}; with fewer the wait shrinks in proportion)")
    return pred.pct[cat], f"the check-up's {cat} fix"


def keys_value(key: str, name: str) -> int | None:
    """The count a trial's name gives a fix (`dataloader_workers=4` -> 4), else None."""
    for part in name.split("+"):
        k, _, v = part.partition("=")
        if k == key and v.isdigit():
            return int(v)
    return None


def try_document(cmd: list[str], rows: list[Trial], base_stats, rounds: int, warmup: int, measure: int,
                 max_steps: int | None, pred: Predictions, notes: list[str]) -> TryDocument:
    """The typed result (document.py TryDocument)."""
    return TryDocument(schema_version=SCHEMA_VERSION, gpucheckup_version=__version__, kind="try", command=list(cmd),
                       base_ms=base_stats.median_ms if base_stats else None,
                       base=side_of(base_stats) if base_stats else None, rounds=rounds, warmup=warmup,
                       measure=measure, max_steps=max_steps, checkup=pred.checkup, fixes=rows, notes=notes)


def run_try(cmd: list[str], fixes: str | None, rounds: int, warmup: int, measure: int, max_steps: int | None,
            out: Path, checkup_dir: Path | None = None, predict: bool = True, progress=None) -> TryDocument:
    """The whole trial (module docstring). `checkup_dir`: a check-up already run on this command (`run --try`);
    `predict=False`: no base check-up. BaseFailed when the command as it is fails."""
    from gpucheckup.analysis.comparison import ab_stats

    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CheckupError("no command to try: gpucheckup try FIX -- python train.py ...")
    if not ab_stats.MIN_ROUNDS <= rounds <= ab.MAX_ROUNDS:
        raise CheckupError(f"--rounds must be from {ab_stats.MIN_ROUNDS} to {ab.MAX_ROUNDS}, got {rounds}")
    if warmup < 0 or measure < ab_stats.MIN_STEPS:
        raise CheckupError(f"--warmup must be 0 or more and --measure at least {ab_stats.MIN_STEPS}")
    if max_steps is not None and max_steps < warmup + ab_stats.MIN_STEPS + 1:
        raise CheckupError(f"--max-steps {max_steps} leaves fewer than {ab_stats.MIN_STEPS} measured steps after the "
                           f"{warmup} warm-up steps (and the first, which has no time): raise it or lower --warmup")
    specs = parse(fixes) if fixes else None
    where = launcher.make_run_dir(out, f"try-{launcher.run_name(cmd)}")
    folder = Path(where.path)
    where.close()
    if checkup_dir is None and (predict or specs is None):
        checkup_dir = base_checkup(cmd, folder, max_steps)
        if progress:
            progress(Side("check-up", cmd), 0)
    pred = predictions(checkup_dir)
    notes = [pred.note] if pred.note else []
    if specs is None:
        keys = list(dict.fromkeys(PROPOSED[k] for k in pred.proposed))
        specs = [TrialSpec(k, [k]) for k in keys]
        if not specs:
            notes.append("The check-up proposes no configuration fix the agent can apply: nothing to try "
                         f"(it applies {', '.join(FIXES)}; name one to try it anyway).")
    trials = [resolve(s, pred.workers) for s in specs]
    base_rounds, outcomes = run_rounds(cmd, trials, rounds, warmup, measure, max_steps, folder, progress) \
        if trials else ([], [])
    base = Side("base", cmd)
    rows = [trial_row(o, base, base_rounds, pred, warmup, measure) for o in outcomes]
    base_stats = None
    if len(base_rounds) >= ab_stats.MIN_ROUNDS:
        base_stats = ab_stats.side_stats("base", [r.host_ms for r in base_rounds])
    notes.append(f"Processes and their output: {folder}")
    return try_document(cmd, rows, base_stats, rounds, warmup, measure, max_steps, pred, notes)
