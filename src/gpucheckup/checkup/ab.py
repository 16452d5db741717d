"""`gpucheckup ab`: measure two configurations the way the baselines protocol says.

A measuring command, above capture (it runs jobs through capture's launcher pieces) and reading
(it reads their steps files): it sits beside checkup/pipeline.py in the layers.

Each side runs as its own process, with the capture agent injected for its step times only (no
profiler: the profiled window is pushed past the end of any job, so no step is slowed); the
sides alternate A B A B ... for `rounds` rounds; from each process's `steps.csv` the first
`warmup` steps are dropped and the next `measure` are kept. The agent also times each step on the GPU
(its `gpu_clock` setting: gpu-steps.csv, CUDA events at each step's end), so that a side whose
host runs ahead of its GPU is found and both sides are compared on the GPU's clock (ab_stats,
"clock"). The statistics are analysis/comparison/ab_stats.py's. `--vary ENV=v1,v2` runs one command with
ENV=v1 (A) and ENV=v2 (B).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from gpucheckup import __version__, layout
from gpucheckup.analysis.comparison import ab_stats
from gpucheckup.capture import launcher
from gpucheckup.capture.agent.settings import LIMITS, SETTINGS
from gpucheckup.document import SCHEMA_VERSION, AbDocument
from gpucheckup.errors import CheckupError
from gpucheckup.trace import rundir

MAX_ROUNDS = 100  # the defaults (20 warm-up, 100 measured, 3 rounds) are `ab`'s options' (cli/parser.py)
NO_PROFILE = {  # the agent's settings for an A/B process: step times only
    "skip": LIMITS["skip"][1],  # the profiled window starts after this many steps: never
    "window_start_s": LIMITS["window_start_s"][1],  # no time-window capture either
    "control": False,
    "gpu_clock": True,  # each step's GPU time too (gpu-steps.csv): a side that runs ahead of its GPU is found
}


@dataclass
class Side:
    """One configuration: its label, command line and extra environment."""

    label: str
    cmd: list[str]
    env: dict[str, str] = field(default_factory=dict)


def split_commands(words: list[str]) -> list[list[str]]:
    """`-- CMD_A -- CMD_B` (argparse may have eaten the first `--`) as two command lines."""
    words = list(words)
    if words and words[0] == "--":
        words = words[1:]
    out, cur = [], []
    for w in words:
        if w == "--":
            out.append(cur)
            cur = []
        else:
            cur.append(w)
    out.append(cur)
    return [c for c in out if c] if len(out) > 1 else out


def sides_from(cmd_words: list[str], vary: str | None) -> tuple[Side, Side]:
    """The two sides from `-- CMD_A -- CMD_B` or from one command and `--vary ENV=v1,v2`."""
    cmds = split_commands(cmd_words)
    if vary:
        name, sep, values = vary.partition("=")
        vals = values.split(",")
        if not sep or not name or len(vals) != 2 or not all(vals):
            raise CheckupError(f"--vary takes ENV=v1,v2 (two values), got {vary!r}")
        if len(cmds) != 1 or not cmds[0]:
            raise CheckupError("with --vary give one command: gpucheckup ab --vary ENV=v1,v2 -- CMD")
        return (Side(f"{name}={vals[0]}", cmds[0], {name: vals[0]}), Side(f"{name}={vals[1]}", cmds[0], {name: vals[1]}))
    if len(cmds) != 2:
        raise CheckupError("give two commands: gpucheckup ab -- CMD_A -- CMD_B (or one with --vary ENV=v1,v2)")
    return Side("A", cmds[0]), Side("B", cmds[1])


def process_env(side: Side, run_dir: Path, run_dir_id: str | None = None) -> dict[str, str]:
    """The environment of one A/B process: the agent injected, step times only, writing into that very folder."""
    env = os.environ.copy()
    env.update(side.env)
    env["PYTHONPATH"] = os.pathsep.join([str(launcher.inject_dir())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                                          else []))
    env[layout.ENV_RUN_DIR] = str(run_dir)
    if run_dir_id:
        env[layout.ENV_RUN_DIR_ID] = run_dir_id
    for name, value in NO_PROFILE.items():
        env[SETTINGS[name][0]] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return env


@dataclass
class Round:
    """One process's measured steps: host-side step times and, when the agent timed them, GPU-side ones (ms)."""

    host_ms: np.ndarray
    gpu_ms: np.ndarray | None  # the same steps on the GPU; None when a measured step has no GPU time
    recorded: int = 0  # the plain (unprofiled, timed) steps the process recorded, warm-up included


def run_round(side: Side, out: Path, round_no: int, warmup: int, measure: int) -> Round:
    """Run one process of one side; its measured steps' times (CheckupError when it failed or gave too few)."""
    run_dir, rc, log = run_process(side, out, round_no)
    if rc != 0:
        raise CheckupError(f"{side.label} (round {round_no}) exited with status {rc}; its output: {log}")
    return measured(side, run_dir, log, warmup, measure)


def run_process(side: Side, out: Path, round_no: int) -> tuple[Path, int, Path]:
    """Run one process of one side in a new run directory under `out`: the directory, the exit status, the log of
    its output (CheckupError when the command cannot start)."""
    rd = launcher.make_run_dir(out, f"{side.label}-round{round_no}")
    run_dir = Path(rd.path)
    log = run_dir / "output.log"
    try:
        with open(log, "wb") as f:
            rc = subprocess.run(side.cmd, env=process_env(side, run_dir, rd.id), stdout=f,
                                stderr=subprocess.STDOUT).returncode
    except OSError as e:
        raise CheckupError(f"{side.label}: cannot run {side.cmd[0]}: {e.strerror or e}") from None
    return run_dir, rc, log


def measured(side: Side, run_dir: Path, log: Path, warmup: int, measure: int) -> Round:
    """The measured steps of one finished process: the first `warmup` dropped, the next `measure` kept."""
    candidates = [run_dir / layout.steps_file(key) for key in (layout.MAIN_KEY, "rank0")]  # rank 0 under torchrun
    steps_file = next((f for f in candidates if f.exists()), candidates[0])
    cols = rundir.read_csv(steps_file, rundir.STEP_TEXT, rundir.STEP_NEEDED, rundir.STEP_FILLED) \
        if steps_file.exists() else {"ms": []}
    if len(cols["ms"]) == 0:  # no file, or the agent's header alone: the job ended without a step
        state = "empty" if steps_file.exists() else "missing"
        raise CheckupError(f"{side.label}: no step times ({steps_file.name} {state}"
                           f"): the agent counts optimizer steps, and this job made none; its output: {log}")
    ms = np.asarray(cols["ms"], dtype=float)
    plain = np.isfinite(ms) & (np.asarray(cols.get("phase") or [""] * len(ms), dtype=object) == "")
    step_no = np.asarray(cols["step"])
    at = np.flatnonzero(plain & (step_no > warmup))[:measure]
    if len(at) < ab_stats.MIN_STEPS:
        raise CheckupError(f"{side.label}: {int(plain.sum())} steps recorded, {len(at)} after the {warmup} warm-up "
                           f"steps; at least {ab_stats.MIN_STEPS} are needed (run more steps or lower --warmup)")
    return Round(ms[at], _gpu_ms(run_dir / layout.agent_files(layout.steps_key(steps_file.name))["gpu_steps"],
                                 step_no[at]), int(plain.sum()))


def _gpu_ms(path: Path, steps: np.ndarray) -> np.ndarray | None:
    """The GPU times of these steps from a gpu-steps file; None without the file or when one of them is missing."""
    if not path.exists():
        return None
    cols = rundir.read_csv(path, set(), layout.GPU_STEP_COLUMNS, layout.GPU_STEP_COLUMNS)
    got = dict(zip(np.asarray(cols["step"]).tolist(), np.asarray(cols["gpu_ms"], dtype=float).tolist()))
    out = np.array([got.get(s, np.nan) for s in steps.tolist()], dtype=float)
    return out if (np.isfinite(out) & (out >= 0)).all() else None


def run_ab(a: Side, b: Side, rounds: int, warmup: int, measure: int,
           out: Path | None = None, progress=None) -> tuple[list[Round], list[Round]]:
    """Interleave the two sides for `rounds` rounds; each side's measured steps per round."""
    if not ab_stats.MIN_ROUNDS <= rounds <= MAX_ROUNDS:
        raise CheckupError(f"--rounds must be from {ab_stats.MIN_ROUNDS} to {MAX_ROUNDS}, got {rounds}")
    if warmup < 0 or measure < ab_stats.MIN_STEPS:
        raise CheckupError(f"--warmup must be 0 or more and --measure at least {ab_stats.MIN_STEPS}")
    keep = out is not None
    where = Path(out) if keep else Path(tempfile.mkdtemp(prefix="gpucheckup-ab-"))
    try:
        got: dict[str, list[Round]] = {a.label: [], b.label: []}
        for r in range(1, rounds + 1):
            for side in (a, b):
                got[side.label].append(run_round(side, where, r, warmup, measure))
                if progress:
                    progress(side, r)
    finally:
        if not keep:
            shutil.rmtree(where, ignore_errors=True)
    return got[a.label], got[b.label]


def short_notes(side: Side, rounds: list[Round], warmup: int, measure: int) -> list[str]:
    """A sentence when the side's processes gave fewer measured steps than --measure asked; none otherwise."""
    got = [len(r.host_ms) for r in rounds]
    if not got or min(got) >= measure:
        return []
    short = [(n, r.recorded) for n, r in zip(got, rounds) if n < measure]
    kept = sorted({n for n, _ in short})
    ran = sorted({rec for _, rec in short})
    return [f"{side.label} measured {'/'.join(map(str, kept))} steps in {len(short)} of its {len(rounds)} rounds, "
            f"not the {measure} --measure asked: its job recorded {'/'.join(map(str, ran))} timed steps, "
            f"{warmup} of them warm-up (run the job longer, or lower --warmup or --measure)."]


def compare(a: Side, b: Side, a_rounds: list[Round], b_rounds: list[Round],
            samples_per_step: float | None = None, warmup: int | None = None,
            measure: int | None = None) -> ab_stats.AbResult:
    """The statistics of the two sides on the clock ab_stats.choose_clock picks (host, or GPU when a side ran ahead of
    its GPU); a CheckupError when a side ran ahead and cannot be timed on the GPU. With `measure`, a side whose
    processes gave fewer steps than that is said."""
    def gpu(rounds):
        return [r.gpu_ms for r in rounds] if all(r.gpu_ms is not None for r in rounds) else None

    try:
        at, bt, ahead = ab_stats.choose_clock(a.label, [r.host_ms for r in a_rounds], gpu(a_rounds),
                                              b.label, [r.host_ms for r in b_rounds], gpu(b_rounds))
    except ValueError as e:
        raise CheckupError(str(e)) from None
    notes = [] if measure is None else (short_notes(a, a_rounds, warmup or 0, measure)
                                        + short_notes(b, b_rounds, warmup or 0, measure))
    return ab_stats.compare(at, bt, a.label, b.label, samples_per_step, ahead, notes)


def document(result: ab_stats.AbResult) -> AbDocument:
    """The comparison as the versioned `ab` document (document.py AbDocument)."""
    return msgspec.convert({"schema_version": SCHEMA_VERSION, "gpucheckup_version": __version__, "kind": "ab",
                            **result.to_dict()}, AbDocument)
