"""Environment facts a check-up can act on (`env.json`, written by `gpucheckup run`).

Definitions (docs/capture.md):
- usable cores: the smallest of the host's CPU count, the process's CPU affinity and the
  cgroup CPU quota (quota / period).
- processes on the host: LOCAL_WORLD_SIZE when set (torchrun), else the number of agent
  processes that reported.
- DataLoader workers on the host: the largest `num_workers` of any DataLoader the job created,
  times the processes on the host (each rank runs its own loader workers).
- intra-op threads: the fewest `torch.get_num_threads()` any process reported at its first step
  (`job.<process>.torch.intra_op_threads`); cores per process: usable cores / processes on the host.
"""

from __future__ import annotations

from dataclasses import dataclass


MAX_COUNT = 10**6  # a count of workers, processes or cores above this is not a real machine's


def _count(v) -> int | None:
    """A count as written by the agent (an integer, 0..MAX_COUNT), else None: env.json may be damaged."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT else None


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def usable_cores(env: dict) -> tuple[float | None, str]:
    """Cores the job can really use, and which limit set it."""
    cpu = _dict(env.get("cpu"))
    limits = {"CPU count": cpu.get("count"), "CPU affinity": cpu.get("affinity"),
              "cgroup quota": cpu.get("cgroup_quota_cpus")}
    limits = {k: v for k, v in limits.items()
              if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= MAX_COUNT}
    if not limits:
        return None, "unknown"
    name = min(limits, key=limits.get)
    return float(limits[name]), name


def dataloader_load(env: dict) -> dict:
    """DataLoader settings seen in the job and the workers they put on the host."""
    loaders = [d for d in env.get("dataloaders") or [] if isinstance(d, dict)] \
        if isinstance(env.get("dataloaders"), list) else []
    job = _dict(env.get("job"))
    local = [_dict(a).get("local_world_size") for a in job.values() if _dict(a).get("local_world_size")]
    procs = int(local[0]) if local and str(local[0]).isdigit() and int(local[0]) <= MAX_COUNT else max(len(job), 1)
    most = max((_count(d.get("num_workers")) or 0 for d in loaders), default=None)
    cores, limit = usable_cores(env)
    return {
        "loaders": len(loaders),
        "max_workers": most,
        "processes_on_host": procs,
        "workers_on_host": None if most is None else most * procs,
        "usable_cores": cores,
        "cores_limited_by": limit,
        "pin_memory": sorted({bool(d.get("pin_memory")) for d in loaders}),
    }


@dataclass(frozen=True)
class ThreadBudget:
    """A CPU-only job's operator time against the threads it gives them: what intra-op threads could speed up."""

    busy_ms_per_step: float  # the main thread's operator time per step (analysis/one_trace/host/cpu_profile.py)
    threads: int  # intra-op threads the job's processes run (the fewest reported)
    cores_per_process: int  # usable cores / processes on the host, rounded down


def intra_op_threads(env: dict) -> int | None:
    """The fewest intra-op threads any of the job's processes reported (None when none did)."""
    seen = [_count(_dict(_dict(a).get("torch")).get("intra_op_threads")) for a in _dict(env.get("job")).values()]
    seen = [n for n in seen if n]
    return min(seen) if seen else None


def thread_budget(env: dict, busy_ms_per_step: float) -> ThreadBudget | None:
    """The thread budget of a CPU-only job (module docstring), or None when the threads or cores are unknown."""
    threads, load = intra_op_threads(env), dataloader_load(env)
    if threads is None or not load["usable_cores"]:
        return None
    per = int(load["usable_cores"] // max(load["processes_on_host"], 1))
    return ThreadBudget(busy_ms_per_step, threads, per)
