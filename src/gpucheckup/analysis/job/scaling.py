"""Scaling efficiency between a 1-GPU run and an N-GPU run of the same job, and where the difference goes.

Definitions (also in docs/metrics.md), for data parallelism with the same batch per GPU:
- throughput = N x batch / step time, so efficiency = N-GPU throughput / (N x 1-GPU throughput)
  = step time on 1 GPU / step time on N GPUs (each the median of the run's unprofiled
  steady-state steps from steps*.csv, else the traces' median step).
- the extra time per step (step_N - step_1) is split, from the N-GPU run's ranks (means over
  ranks): `waiting` (exposed wait: for another rank, analysis/job/ranks.py), `transfer` (exposed
  communication kernel time less that wait), `compute` (non-communication GPU time per step,
  N-GPU less 1-GPU), and `other` (the rest: host work, idle GPU, profiler noise). The parts come
  from the profiled window and the step times from unprofiled steps, so `other` also holds their
  difference; it can be negative.
Under EFFICIENCY_LOW_PCT (80%) the mission says: look at communication.
- environment differences: what env.json says about each run, compared (env_differences): the host,
  its usable cores, the GPUs' names, the torch version, torch's intra-op threads per process and
  the recorded variables (OMP_*, MKL_*, NCCL_*, CUDA_*, ...; each process's own where the agent
  recorded them, else the launcher's; the variables that name the world size and rendezvous differ
  by design and are left out). A run's value is the set of its processes' values.
- above 100%: N ranks cannot do N times the work of one in less than N times the time unless the
  runs differ in something other than their rank count; the likely cause (over_100_cause) is named
  from the environment differences: CPU threads first (torchrun sets OMP_NUM_THREADS=1 in each rank
  when it starts more than one, and leaves it unset for one, so the 1-rank run's CPU work runs on
  every core's thread and a busy host slows it), then any other difference, else a difference the
  environment does not show (batch per rank, other load on the host).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EFFICIENCY_LOW_PCT = 80.0
EFFICIENCY_HIGH_PCT = 100.0
BY_DESIGN = ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # differ between 1 and N ranks
THREAD_NAMES = ("torch threads per process", "OMP_", "MKL_")  # differences that change CPU work's speed


@dataclass
class EnvDifference:
    """One thing env.json records that differs between the runs: its value in the 1-GPU and in the N-GPU run."""

    name: str
    run_1: str
    run_n: str


@dataclass
class Scaling:
    """Scaling efficiency and the split of the extra step time."""

    n: int
    step_1_ms: float
    step_n_ms: float
    efficiency_pct: float
    extra_ms: float
    parts_ms: dict[str, float] = field(default_factory=dict)
    step_from: str = ""
    env_differences: list[EnvDifference] = field(default_factory=list)
    over_100_cause: str | None = None  # set when efficiency is above 100%

    @property
    def low(self) -> bool:
        return self.efficiency_pct < EFFICIENCY_LOW_PCT

    @property
    def low_pct(self) -> float:
        """The efficiency under which the N-GPU run is said to scale poorly (EFFICIENCY_LOW_PCT)."""
        return EFFICIENCY_LOW_PCT

    @property
    def high(self) -> bool:
        return self.efficiency_pct > EFFICIENCY_HIGH_PCT


def scaling(n: int, step_1_ms: float, step_n_ms: float, compute_1_ms: float | None, compute_n_ms: float | None,
            exposed_comm_n_ms: float, exposed_wait_n_ms: float, step_from: str = "",
            env_1: dict | None = None, env_n: dict | None = None) -> Scaling:
    """Efficiency of the N-GPU run against the 1-GPU run, the extra time per step by part, the environment
    differences between the runs (their env.json) and, above 100%, its likely cause."""
    extra = step_n_ms - step_1_ms
    parts = {"waiting": exposed_wait_n_ms, "transfer": max(exposed_comm_n_ms - exposed_wait_n_ms, 0.0)}
    if compute_1_ms is not None and compute_n_ms is not None:
        parts["compute"] = compute_n_ms - compute_1_ms
    parts["other"] = extra - sum(parts.values())
    out = Scaling(n=n, step_1_ms=step_1_ms, step_n_ms=step_n_ms, efficiency_pct=100 * step_1_ms / step_n_ms,
                  extra_ms=extra, parts_ms=parts, step_from=step_from,
                  env_differences=env_differences(env_1 or {}, env_n or {}))
    if out.high:
        out.over_100_cause = over_100_cause(out)
    return out


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _joined(values: set[str]) -> str:
    return ", ".join(sorted(values)) if values else "not recorded"


def environment(env: dict) -> dict[str, str]:
    """What one run's env.json says, by name (module docstring, environment differences); values as text."""
    jobs = [_dict(a) for a in _dict(env.get("job")).values()]
    cpu, out = _dict(env.get("cpu")), {}
    if env.get("hostname"):
        out["host"] = str(env["hostname"])
    if cpu.get("usable") is not None:
        out["usable cores"] = f"{cpu['usable']:g}" if isinstance(cpu["usable"], (int, float)) else str(cpu["usable"])
    gpus = [str(_dict(g).get("name")) for g in env.get("gpus") or [] if _dict(g).get("name")]
    out["GPUs"] = ", ".join(sorted(set(gpus))) or "none"
    torch = {str(_dict(a.get("torch")).get("version")) for a in jobs if _dict(a.get("torch")).get("version")}
    if torch:
        out["torch"] = _joined(torch)
    threads = {str(_dict(a.get("torch")).get("intra_op_threads")) for a in jobs
               if _dict(a.get("torch")).get("intra_op_threads")}
    if threads:
        out["torch threads per process"] = _joined(threads)
    launcher = {k: str(v) for k, v in _dict(env.get("variables")).items()}
    own = [{k: str(v) for k, v in _dict(a.get("variables")).items()} for a in jobs if isinstance(a.get("variables"),
                                                                                                    dict)]
    per_process = own or [launcher]  # a process's own variables hold what it inherited and what its launcher set
    for name in sorted({k for d in per_process for k in d} - set(BY_DESIGN)):
        out[name] = _joined({d.get(name, "unset") for d in per_process})
    return out


def env_differences(env_1: dict, env_n: dict) -> list[EnvDifference]:
    """What differs between the two runs' environments (module docstring); nothing when either was not recorded."""
    if not env_1 or not env_n:
        return []
    a, b = environment(env_1), environment(env_n)
    return [EnvDifference(k, a.get(k, "unset"), b.get(k, "unset")) for k in sorted(set(a) | set(b))
            if a.get(k, "unset") != b.get(k, "unset")]


def over_100_cause(sc: Scaling) -> str:
    """The likely cause of an efficiency above 100% (module docstring)."""
    threads = [d for d in sc.env_differences if d.name.startswith(THREAD_NAMES)]
    said = "; ".join(f"{d.name} {d.run_1} (1 rank) vs {d.run_n} ({sc.n} ranks)" for d in threads or sc.env_differences)
    if threads:
        return (f"the runs used different CPU threads per process ({said}): the 1-rank run's CPU work ran with other "
                f"threads than each rank of the {sc.n}-rank run, so its step time is not one rank's; set the same "
                f"OMP_NUM_THREADS for both runs")
    if sc.env_differences:
        return f"the runs' environments differ ({said}): make them the same and measure again"
    return (f"the runs differ in something env.json does not record: a smaller batch per rank in the {sc.n}-rank run, "
            f"another configuration, or other load on the host during the 1-rank run")
