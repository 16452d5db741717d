"""Reading a light window's host samples (host-samples[-<key>].json, written by capture/sampler.py).

The file (layout.HOST_SAMPLES_KEYS) holds the main thread's stack at every change py-spy saw, as
[microseconds after spawned_epoch_s, main_stack]; here the times become Unix microseconds, the clock
of a trace's `baseTimeNanoseconds / 1000 + ts`.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import numpy as np

from gpucheckup import layout
from gpucheckup.errors import CheckupError
from gpucheckup.files import check_regular


class HostSamples(msgspec.Struct):
    """The main thread's sampled stacks of one process's light window."""

    path: str
    key: str
    rate_hz: float
    t_us: np.ndarray  # Unix microseconds of each change, ascending
    stacks: list[str]  # the main thread's stack from that change on (layout.FRAME_SEP-joined, innermost first)
    end_us: float  # Unix microseconds when sampling was stopped
    threads: dict[str, str]


def read_host_samples(path: Path) -> HostSamples:
    """One host-samples file; CheckupError when it is unreadable."""
    check_regular(Path(path))  # a FIFO would block the read forever
    try:
        d = json.loads(Path(path).read_text())
        base_us = float(d["spawned_epoch_s"]) * 1e6
        rows = d["main"]
        t = np.array([float(r[0]) for r in rows], dtype=float) + base_us
        stacks = [str(r[1]) for r in rows]
        end = float(d.get("ended_epoch_s") or 0.0) * 1e6
        rate = float(d["rate_hz"])
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise CheckupError(f"{path}: unreadable host samples ({type(e).__name__}: {e})") from None
    order = np.argsort(t, kind="stable")
    end = max(end, float(t[-1]) if len(t) else 0.0)
    return HostSamples(str(path), str(d.get("key") or layout.MAIN_KEY), rate, t[order],
                       [stacks[i] for i in order], end, {str(k): str(v) for k, v in (d.get("threads") or {}).items()})


def host_samples_for(run_dir: Path, key: str) -> HostSamples | None:
    """The host samples of process `key` in a run directory, or None when it has none."""
    p = Path(run_dir) / layout.agent_files(key)["host_samples"]
    return read_host_samples(p) if p.is_file() else None
