"""The environment of a run (env.json): GPUs, driver, topology, CPU budget, variables, and what the job saw.

Collected by the launcher (host side, outside the job) and merged at the end with what each
agent saw inside the job (torch, CUDA, cuDNN and NCCL versions, DataLoader settings). Every
probe that fails leaves its reason in place of the value; none stops the run.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from gpucheckup import layout
from gpucheckup.capture.telemetry import nvml_text

SMI_TIMEOUT_S = 15


def collect_host(environ=None) -> dict:
    """Everything the host says about the run's environment; each probe on its own, so that one that fails
    (an unexpected error included) loses only its own fields: they keep an empty value of their type (the
    reader checks types) and `unavailable` says why."""
    environ = os.environ if environ is None else environ
    out: dict = {"collected_epoch_s": time.time()}
    unavailable = {}
    for key, probe, empty in (
        ("hostname", socket.gethostname, ""),
        ("platform", platform.platform, ""),
        ("python_launcher", lambda: sys.version.split()[0], ""),
        ("cpu", cpu_budget, {}),
        ("memory_gb", _memory_gb, None),
        ("variables", lambda: layout.run_variables(environ), {}),
        ("gpus", gpu_inventory, {"gpus": []}),  # several fields: gpus, nvml, driver, cuda_driver
        ("topology", nvidia_smi_topology, ""),
    ):
        try:
            value = probe()
        except Exception as e:  # noqa: BLE001 - one probe's failure must not lose the others' fields
            unavailable[key] = f"{type(e).__name__}: {e}"
            value = empty
        if key == "gpus":
            out.update(value)
            if key in unavailable:
                out["nvml"] = f"unavailable: {unavailable[key]}"
        else:
            out[key] = value
    if unavailable:
        out["unavailable"] = unavailable
    return out


def cpu_budget() -> dict:
    """CPU count, the affinity mask, the cgroup CPU quota and the NUMA nodes."""
    out = {"count": os.cpu_count()}
    try:
        out["affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        out["affinity"] = None
    out["cgroup_quota_cpus"], out["cgroup_source"] = cgroup_quota()
    out["numa_nodes"] = numa_nodes()
    usable = [x for x in (out["count"], out["affinity"], out["cgroup_quota_cpus"]) if x]
    out["usable"] = min(usable) if usable else None
    return out


def cgroup_quota(root: Path = Path("/sys/fs/cgroup"),
                 own: Path = Path("/proc/self/cgroup")) -> tuple[float | None, str]:
    """CPUs the cgroup allows (quota / period), the tightest from the process's own cgroup up to the root
    (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us), or None when unlimited or unknown."""
    found = []
    try:
        for d in _cgroup_dirs(root, own):
            if (d / "cpu.max").is_file():
                quota, period = (d / "cpu.max").read_text().split()[:2]
                if quota != "max":
                    found.append((int(quota) / int(period), str(d / "cpu.max")))
            elif (d / "cpu.cfs_quota_us").is_file() and (d / "cpu.cfs_period_us").is_file():
                quota = int((d / "cpu.cfs_quota_us").read_text())
                if quota >= 0:
                    found.append((quota / int((d / "cpu.cfs_period_us").read_text()), str(d / "cpu.cfs_quota_us")))
    except (OSError, ValueError) as e:
        return None, f"unreadable: {e}"
    if found:
        return min(found)
    seen = [d for d in _cgroup_dirs(root, own) if (d / "cpu.max").is_file() or (d / "cpu.cfs_quota_us").is_file()]
    return None, (f"no quota ({seen[0]})" if seen else "no cgroup CPU controller found")


def _cgroup_dirs(root: Path, own: Path) -> list[Path]:
    """The process's own cgroup folders (v2 unified and v1 `cpu`), each up to its hierarchy's root, then the roots."""
    out = []
    try:
        lines = own.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        hid, controllers, rel = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "":
            bases = [root, root / "unified"]
        elif "cpu" in controllers.split(","):
            bases = [root / "cpu", root / controllers]
        else:
            continue
        for base in bases:
            d = base / rel.strip("/")
            while d != base and base in d.parents:
                out.append(d)
                d = d.parent
    return [d for d in dict.fromkeys(out + [root, root / "unified", root / "cpu"]) if d.is_dir()]


def numa_nodes(root: Path = Path("/sys/devices/system/node")) -> list[dict]:
    """NUMA nodes and their CPU lists."""
    nodes = []
    for d in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        try:
            nodes.append({"node": int(d.name[4:]), "cpus": (d / "cpulist").read_text().strip()})
        except OSError:
            continue
    return nodes


def _memory_gb() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return round(pages * size / 1e9, 1)
    except (ValueError, OSError, AttributeError):
        return None


def gpu_inventory() -> dict:
    """GPUs, driver and CUDA driver version, MIG mode, from NVML."""
    try:
        import pynvml
    except ImportError:
        return {"gpus": [], "nvml": "unavailable: nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return {"gpus": [], "nvml": f"unavailable: {e}"}
    out = {"nvml": "ok", "gpus": []}
    try:
        out["driver"] = nvml_text(pynvml.nvmlSystemGetDriverVersion())
        v = pynvml.nvmlSystemGetCudaDriverVersion()
        out["cuda_driver"] = f"{v // 1000}.{v % 1000 // 10}"
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            g = {"index": i, "name": nvml_text(pynvml.nvmlDeviceGetName(h)),
                 "uuid": nvml_text(pynvml.nvmlDeviceGetUUID(h))}
            for key, fn in (
                ("memory_total_gb", lambda: round(pynvml.nvmlDeviceGetMemoryInfo(h).total / 1e9, 1)),
                ("mig_mode", lambda: "enabled" if pynvml.nvmlDeviceGetMigMode(h)[0] else "disabled"),
                ("power_limit_w", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
                ("max_sm_clock_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                ("pcie_gen", lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
                ("pcie_width", lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
            ):
                try:
                    value = fn()
                except Exception as e:  # noqa: BLE001
                    value = f"unavailable: {e}"
                if value is not None:
                    g[key] = value
            out["gpus"].append(g)
    except Exception as e:  # noqa: BLE001
        out["nvml"] = f"partial: {e}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return out


def nvidia_smi_topology() -> str:
    """`nvidia-smi topo -m`, or why it could not be run."""
    try:
        res = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except FileNotFoundError:
        return "unavailable: nvidia-smi not found"
    except OSError as e:  # found but not runnable: a folder on PATH it cannot enter, no execute permission
        return f"unavailable: nvidia-smi cannot be run ({e.strerror or e})"
    except subprocess.TimeoutExpired:
        return f"unavailable: nvidia-smi topo -m took over {SMI_TIMEOUT_S} s"
    if res.returncode != 0:
        return f"unavailable: nvidia-smi topo -m exited {res.returncode}: {res.stderr.strip()[:200]}"
    return _strip_ansi(res.stdout)


def merge_agents(env: dict, agents: dict[str, dict]) -> dict:
    """Add what the agents saw inside the job: torch versions and DataLoader settings per process."""
    env = dict(env)
    env["job"] = {
        key: {k: a.get(k) for k in ("pid", "rank", "local_rank", "world_size", "local_world_size", "python",
                                     "torch", "dataloaders", "dataloaders_created", "step_pacer", "variables")}
        for key, a in sorted(agents.items())
    }
    first = next(iter(sorted(agents.items())), (None, {}))[1]
    if first.get("torch"):
        env["torch"] = first["torch"]
    loaders = [d for a in agents.values() for d in (a.get("dataloaders") or [])]
    env["dataloaders"] = loaders
    return env


def _strip_ansi(s: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", s)
