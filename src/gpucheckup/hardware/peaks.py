"""The datasheet peak table (data/gpu_peaks.json) and device-name matching.

Peaks are dense (no 2:4 sparsity) TFLOP/s per dtype and memory bandwidth in GB/s; each entry cites
the vendor document it was read from. A device name (`nvidia-smi`, torch's
`get_device_name`, a trace's `deviceProperties`) is normalised (lower case, vendor and brand words
and punctuation removed) and matched against the entries in file order: an entry matches when all
its `match` patterns are found. Specific entries come first (H100 NVL and PCIe before H100 SXM,
L40S before L40 before L4, A10G before A10), and word boundaries keep "l4" out of "l40s".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")
# Pinned host<->device rate assumed when a trace has no pinned copy to measure: PCIe 4.0 x16 reaches
# ~25 GB/s pinned (the H200 host measured 54), so a pinned copy's time is not understated.
PINNED_GB_S = 25.0
_DROP_WORDS = re.compile(r"\b(nvidia|geforce|tesla|quadro|amd|instinct|radeon|generation|graphics)\b")


@dataclass(frozen=True)
class GpuPeak:
    """One GPU's datasheet figures."""

    id: str
    vendor: str
    arch: str
    memory_gb: float
    mem_bw_gb_s: float
    tflops: dict[str, float | None]
    source: str
    notes: str = ""
    match: tuple[str, ...] = field(default=(), repr=False)

    def peak(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for a dtype (bf16, fp16, tf32, fp32, fp8), None when unsupported."""
        return self.tflops.get(dtype)

    def ridge(self, dtype: str) -> float | None:
        """Ridge point in FLOP per byte: peak FLOP/s over memory bandwidth in byte/s."""
        p = self.peak(dtype)
        return p * 1e12 / (self.mem_bw_gb_s * 1e9) if p and self.mem_bw_gb_s else None

    def to_dict(self) -> dict:
        return {"id": self.id, "vendor": self.vendor, "arch": self.arch, "memory_gb": self.memory_gb,
                "mem_bw_gb_s": self.mem_bw_gb_s, "tflops": dict(self.tflops), "source": self.source,
                "notes": self.notes}


@lru_cache(maxsize=1)
def table() -> tuple[GpuPeak, ...]:
    """Every entry of the peak table, in matching order."""
    raw = json.loads((Path(__file__).parents[1] / "data" / "gpu_peaks.json").read_text())  # importlib.resources: ~8 ms more
    return tuple(
        GpuPeak(id=g["id"], vendor=g["vendor"], arch=g["arch"], memory_gb=g["memory_gb"],
                mem_bw_gb_s=g["mem_bw_gb_s"], tflops={d: g["tflops"].get(d) for d in DTYPES},
                source=g["source"], notes=g.get("notes", ""), match=tuple(g["match"]))
        for g in raw["gpus"]
    )


def normalise(name: str) -> str:
    """`NVIDIA A100-SXM4-80GB` -> `a100 sxm4 80gb`; `NVIDIA GeForce RTX 4090` -> `rtx 4090`."""
    s = name.lower()
    s = re.sub(r"[^a-z0-9]+", " ", s)
    s = _DROP_WORDS.sub(" ", s)
    return " ".join(s.split())


def match_gpu(name: str) -> GpuPeak | None:
    """The peak-table entry for a device name, or None when the GPU is not in the table."""
    n = normalise(name)
    if not n:
        return None
    for g in table():
        if all(re.search(p, n) for p in g.match):
            return g
    return None


def by_id(gpu_id: str) -> GpuPeak | None:
    """An entry by its id (case-insensitive), e.g. `H100-SXM`."""
    for g in table():
        if g.id.lower() == gpu_id.lower():
            return g
    return None


def lookup(name: str) -> GpuPeak | None:
    """An entry by id, else by device-name matching."""
    return by_id(name) or match_gpu(name)
