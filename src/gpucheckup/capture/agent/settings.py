"""The agent's settings: GPUCHECKUP_* variables (set by `gpucheckup run` from its options), their
defaults and limits, and the process key. Standard library only (it runs inside the user's job)."""

from __future__ import annotations

SETTINGS = {  # name: (environment variable, default, kind)
    "skip": ("GPUCHECKUP_SKIP", 20, "int"),
    "steps": ("GPUCHECKUP_STEPS", 5, "int"),
    "record_shapes": ("GPUCHECKUP_RECORD_SHAPES", False, "bool"),
    "with_stack": ("GPUCHECKUP_WITH_STACK", False, "bool"),
    "flops": ("GPUCHECKUP_FLOPS", False, "bool"),
    "window_start_s": ("GPUCHECKUP_WINDOW_START_S", 60.0, "float"),
    "window_s": ("GPUCHECKUP_WINDOW_S", 10.0, "float"),
    "control": ("GPUCHECKUP_CONTROL", True, "bool"),
    "light": ("GPUCHECKUP_LIGHT", False, "bool"),
    # the CUPTI light window also records host synchronizations (agent/cupti_window.py SYNC_ACTIVITIES): costs more
    "light_syncs": ("GPUCHECKUP_LIGHT_SYNCS", False, "bool"),
    # the CUPTI light window's counter steps before its record steps (agent/pm_counters.py); 0: records only
    "light_counter_steps": ("GPUCHECKUP_LIGHT_COUNTER_STEPS", 20, "int"),
    "gpu_clock": ("GPUCHECKUP_GPU_CLOCK", False, "bool"),  # gpu-steps.csv (agent/gpu_clock.py), for `gpucheckup ab`
    # end the job cleanly (SystemExit(0) from the step hook) after this many optimizer steps; 0: never (`try`)
    "max_steps": ("GPUCHECKUP_MAX_STEPS", 0, "int"),
}
LIMITS = {"max_steps": (0, 10**9), "skip": (2, 10**9), "steps": (1, 1000), "light_counter_steps": (0, 1000), "window_start_s": (0.0, 1e7), "window_s": (0.1, 3600.0)}
DURATION_MAX_STEPS = 100  # a window asked for in seconds stops after this many steps: more adds only trace size


def parse_settings(environ) -> tuple[dict, list[str]]:
    """Settings from the environment, with a message for every value that could not be used."""
    out, errors = {}, []
    for name, (var, default, kind) in SETTINGS.items():
        raw = environ.get(var)
        out[name] = default
        if raw is None or raw == "":
            continue
        try:
            if kind == "bool":
                low = raw.strip().lower()
                if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError
                value = low in ("1", "true", "yes", "on")
            elif kind == "int":
                value = int(raw)
            else:
                value = float(raw)
                if value != value:  # nan
                    raise ValueError
        except ValueError:
            errors.append(f"bad setting {var}={raw!r} (expected {kind}); using the default {default}")
            continue
        lo_hi = LIMITS.get(name)
        if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
            clipped = min(max(value, lo_hi[0]), lo_hi[1])
            errors.append(f"setting {var}={raw!r} is outside {lo_hi[0]}..{lo_hi[1]}; using {clipped}")
            value = type(default)(clipped)
        out[name] = value
    return out, errors


def process_key(environ) -> str:
    """`rank<R>` under a distributed launcher (RANK set), else `main`."""
    rank = environ.get("RANK", "")
    return f"rank{int(rank)}" if rank.strip().isdigit() else "main"
