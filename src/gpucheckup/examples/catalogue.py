"""The examples and their fix flags, read from each script's own argument parser."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from gpucheckup.examples import NAMES

FIX_PREFIX = "fix: "  # an option whose help starts so applies a fix


@dataclass
class Example:
    """One runnable example."""

    name: str
    summary: str
    flags: list[tuple[str, str]]  # (flag, what it does), fixes first


def examples() -> list[Example]:
    """Every example with its flags (importing a script does not import torch)."""
    out = []
    for name in NAMES:
        mod = importlib.import_module(f"gpucheckup.examples.{name}")
        fixes, other = [], []
        for action in mod.build_parser()._actions:
            if not action.option_strings or action.dest == "help":
                continue
            flag = max(action.option_strings, key=len)
            if action.metavar or action.nargs != 0:
                flag += f" {action.metavar or action.dest.upper()}"
            (fixes if (action.help or "").startswith(FIX_PREFIX) else other).append((flag, action.help or ""))
        out.append(Example(name, " ".join((mod.__doc__ or "").strip().split("\n\n")[0].split()), fixes + other))
    return out
