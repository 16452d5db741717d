"""What `gpucheckup run` and `gpucheckup attach` are asked to capture, their defaults and limits, and the
checks made before anything starts (a bad option is a one-line CheckupError, and no job, no sampling).

Light at import (the command line's parser reads the defaults here): the standard library, the
agent's settings and the control protocol's limits only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gpucheckup.capture.agent.settings import LIMITS
from gpucheckup.capture.limits import SECONDS_MAX, STEPS_MAX
from gpucheckup.errors import CheckupError

DEFAULT_OUT = Path("gpucheckup-runs")
NVML_HZ_MAX = 100.0  # NVML's utilization has a sample period of 1/6 s to 1 s: faster only costs CPU
DEFAULT_NVML_HZ = 10.0

ATTACH_MODES = ("auto", "agent", "inject", "py-spy")  # tried in this order by `auto`
DEFAULT_DURATION_S = 20.0  # py-spy sampling
DEFAULT_STEPS = 5  # agent: as `gpucheckup run`; a job that steps no optimizer gets DEFAULT_WINDOW_S instead
DEFAULT_WINDOW_S = 5.0
DEFAULT_RATE = 4.0
RATE_MAX = 20.0  # each py-spy dump is a process start and a walk of every thread: more would load the host
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_SAMPLE_HZ = 100.0  # py-spy samples per second in the light window: 10 ms resolution on gaps
LIGHT_HZ_MAX = 250.0  # py-spy walks every thread per sample; above this the sampler itself loads a core


@dataclass
class RunOptions:
    """What `gpucheckup run` captures and where (None: the agent's default, agent/settings.py)."""

    out: Path = DEFAULT_OUT
    name: str | None = None
    skip: int | None = None
    steps: int | None = None
    record_shapes: bool = False
    with_stack: bool = False
    flops: bool = False
    window_start: float | None = None
    window: float | None = None
    nvml_hz: float = DEFAULT_NVML_HZ
    no_nvml: bool = False
    light: bool = False
    light_syncs: bool = False
    counter_steps: int | None = None  # the light window's counter steps before its records (agent/pm_counters.py)
    sample_hz: float = DEFAULT_SAMPLE_HZ
    max_steps: int | None = None  # end the job cleanly after this many optimizer steps (agent/settings.py)

    def check(self) -> None:
        """Every option the launcher or the agent will use: CheckupError if one is out of its limits."""
        given = {"skip": ("--skip", self.skip), "steps": ("--steps", self.steps),
                 "max_steps": ("--max-steps", self.max_steps), "light_counter_steps": ("--counter-steps", self.counter_steps),
                 "window_start_s": ("--window-start", self.window_start), "window_s": ("--window", self.window)}
        for name, (flag, v) in given.items():
            lo, hi = LIMITS[name]
            if v is not None and not (math.isfinite(v) and lo <= v <= hi):
                raise CheckupError(f"{flag} must be from {_num(lo)} to {_num(hi)}, got {_num(v)}")
        if self.light_syncs and not self.light:
            raise CheckupError("--light-syncs needs --light (it adds to the light window's records)")
        if self.counter_steps is not None and not self.light:
            raise CheckupError("--counter-steps needs --light (they come before the light window's records)")
        if not (math.isfinite(self.nvml_hz) and 0 < self.nvml_hz <= NVML_HZ_MAX):
            raise CheckupError(f"--nvml-hz must be above 0 and at most {_num(NVML_HZ_MAX)}, got {_num(self.nvml_hz)}")
        if not (math.isfinite(self.sample_hz) and 1 <= self.sample_hz <= LIGHT_HZ_MAX):
            raise CheckupError(f"--sample-hz must be from 1 to {_num(LIGHT_HZ_MAX)}, got {_num(self.sample_hz)}")


@dataclass
class AttachOptions:
    """How to attach to which process, and for how long."""

    pid: int
    duration: float | None = None
    steps: int | None = None
    mode: str = "auto"
    out: Path = DEFAULT_OUT
    rate: float = DEFAULT_RATE
    native: bool = False
    timeout: float = DEFAULT_TIMEOUT_S

    def check(self) -> None:
        """CheckupError for an option out of its limits."""
        top = pid_max()
        if not 1 <= self.pid <= top:  # 0 and -1 would name a process group or every process to os.kill
            raise CheckupError(f"--pid must be a process id from 1 to {top}, got {self.pid}")
        if self.steps is not None and not 1 <= self.steps <= STEPS_MAX:
            raise CheckupError(f"--steps must be from 1 to {STEPS_MAX}")
        if self.duration is not None and not 0.1 <= self.duration <= SECONDS_MAX:
            raise CheckupError(f"--duration must be from 0.1 to {SECONDS_MAX:g} seconds")
        if not 0.1 <= self.rate <= RATE_MAX:  # also refuses nan
            raise CheckupError(f"--rate must be from 0.1 to {RATE_MAX:g} dumps per second, got {self.rate:g}")
        if not 0 < self.timeout < float("inf"):
            raise CheckupError(f"--timeout must be a number of seconds above 0, got {self.timeout:g}")


PID_MAX_DEFAULT = 4194304  # Linux's largest pid_max (2^22), where /proc/sys/kernel/pid_max cannot be read


def pid_max() -> int:
    """The largest process id this system hands out."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return PID_MAX_DEFAULT


def _num(x: float) -> str:
    """A limit or value as a person writes it: 1000000000, 0.1, nan."""
    return str(int(x)) if math.isfinite(x) and float(x).is_integer() else f"{x:g}"
