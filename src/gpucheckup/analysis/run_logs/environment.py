"""Environment facts a check-up can act on (`env.json`, written by `gpucheckup run`).

Definitions (docs/capture.md):
- usable cores: the smallest of the host's CPU count, the process's CPU affinity and the
  cgroup CPU quota (quota / period).
- processes on the host: LOCAL_WORLD_SIZE when set (torchrun), else the number of agent
  processes that reported.
- DataLoader workers on the host: the largest `num_workers` of any DataLoader the job created,
  times the processes on the host (each rank runs its own loader workers).
"""

from __future__ import annotations


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
