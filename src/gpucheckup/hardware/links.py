"""Collective bandwidth as nccl-tests defines it, and the link between GPUs it is judged against.

Definitions (also in docs/metrics.md):
- algbw = S / t, S the collective's data size in bytes as nccl-tests counts it: the buffer of
  an all-reduce, broadcast or reduce; the whole gathered output of an all-gather; the whole
  input of a reduce-scatter; the whole send buffer of an all-to-all; t the transfer time.
- busbw = algbw x BUS_FACTOR[collective](n), n the ranks in the group: the bandwidth each
  rank's link must carry, comparable across collectives and group sizes and with the link's
  figure (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; the others 1).
- link_gb_s: one direction of the link between two GPUs: NVLink links x GB/s per link of the
  generation (from `nvidia-smi topo -m`'s NV<k> and the GPU's compute capability), or the PCIe
  figure; or, when `gpucheckup commbench` ran on this machine, the best all-reduce busbw it
  measured (what the link really gives).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

# GB/s per NVLink link and direction, by the compute capability's major version (NVLink 2, 3, 4, 5).
NVLINK_GB_S_PER_LINK = {7: 25.0, 8: 25.0, 9: 25.0, 10: 50.0}
# One direction of a x16 PCIe slot, by compute capability (Gen3 before Ampere, Gen4 Ampere, Gen5 Hopper on).
PCIE_GB_S = {7: 16.0, 8: 32.0, 9: 64.0, 10: 64.0}
COMMBENCH_FORMAT = "gpucheckup-commbench/1"
COMMBENCH_FILE = "commbench.json"  # in a run directory; else the cache, by device and rank count


def canonical(name: str) -> str:
    """A collective's canonical name: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, ..."""
    n = name.lower().replace("-", "_")
    n = re.sub(r"^(c10d::|nccl:|gloo:|nccldevkernel_)", "", n)
    compact = n.replace("_", "")
    for key, canon in (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                       ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"),
                       ("send", "send_recv"), ("recv", "send_recv"), ("reduce", "reduce"), ("barrier", "barrier")):
        if compact.startswith(key) or f"_{key}" in "_" + compact:
            return canon
    return n


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw for a collective over n ranks."""
    if n <= 1:
        return 0.0
    c = canonical(collective)
    if c == "all_reduce":
        return 2 * (n - 1) / n
    if c in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def data_bytes(collective: str, in_bytes: float, out_bytes: float, n: int) -> float:
    """The size S nccl-tests divides by the time: the larger of a rank's input and output buffer
    (all-gather: the gathered output; reduce-scatter: the whole input; all-reduce: the buffer)."""
    return max(in_bytes, out_bytes)


def busbw_gb_s(collective: str, nbytes: float, ms: float, n: int) -> float | None:
    """Bus bandwidth in GB/s of one collective moving nbytes (S) in ms over n ranks."""
    if ms <= 0 or nbytes <= 0 or n <= 1:
        return None
    return nbytes / (ms / 1e3) / 1e9 * bus_factor(collective, n)


def link_from_topology(topology: str, compute_capability: str) -> tuple[float, str] | None:
    """One direction of the GPU-to-GPU link from `nvidia-smi topo -m` text: (GB/s, how it was derived)."""
    if not topology:
        return None
    major = int(compute_capability.split(".")[0]) if compute_capability[:1].isdigit() else 9
    rows = [ln.split() for ln in topology.splitlines() if re.match(r"\s*GPU\d+\s", ln)]
    links = [int(m.group(1)) for r in rows for c in r[1:] for m in [re.fullmatch(r"NV(\d+)", c)] if m]
    if links:
        k = min(links)
        per = NVLINK_GB_S_PER_LINK.get(major, 25.0)
        return k * per, f"NVLink: NV{k} in nvidia-smi topo -m, {k} links x {per:g} GB/s per direction"
    cells = {c for r in rows for c in r[1:] if c in ("PIX", "PXB", "PHB", "NODE", "SYS")}
    if cells:
        gb = PCIE_GB_S.get(major, 32.0)
        return gb, f"PCIe ({'/'.join(sorted(cells))} in nvidia-smi topo -m): x16, {gb:g} GB/s per direction"
    return None


def cache_path(device: str, nranks: int) -> Path:
    """Where `gpucheckup commbench` keeps its figures by default: commbench-<device>-x<n>.json."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "cpu"
    return Path(base) / "gpucheckup" / f"commbench-{slug}-x{nranks}.json"


def read_commbench(path: Path) -> dict | None:
    """A commbench result, or None when the file is missing or not one."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and d.get("format") == COMMBENCH_FORMAT else None


def measured_link(bench: dict) -> tuple[float, str] | None:
    """The best all-reduce busbw a commbench measured: (GB/s, where from)."""
    rows = [r for r in bench.get("results", []) if r.get("op") == "all_reduce" and r.get("busbw_gb_s")]
    if not rows:
        return None
    best = max(rows, key=lambda r: r["busbw_gb_s"])
    return float(best["busbw_gb_s"]), (f"gpucheckup commbench ({bench.get('backend', '?')}, {bench.get('nranks')} "
                                       f"ranks): all-reduce busbw {best['busbw_gb_s']:.1f} GB/s at "
                                       f"{best['bytes'] / 2**20:.0f} MiB")
