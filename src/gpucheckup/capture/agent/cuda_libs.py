"""The CUDA libraries a light window loads from the CUDA wheels torch carries, so that CUPTI's Python bindings find
the ones torch uses (agent/cupti_window.py: libcupti; agent/pm_counters.py: nvperf). Standard library only."""

from __future__ import annotations

import os


def load_wheel_libraries(pattern: str, first_only: bool = False) -> list[str]:
    """Load with RTLD_GLOBAL the libraries named `pattern` that the CUDA wheels on sys.path carry
    (site-packages/nvidia/*/lib, as torch's do), so that a later load by name finds the one torch uses; the paths
    loaded (only the first that loads when `first_only`)."""
    import ctypes
    import glob
    import sys

    done = []
    for root in sys.path:
        for path in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "lib", pattern))):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            done.append(path)
            if first_only:
                return done
    return done
