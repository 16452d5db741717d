"""Benchmark: what the always-on agent adds to every training step, measured directly.

The agent's only per-step work is the global optimizer post-step hook (`Agent._on_step`): two
clock reads, one formatted CSV row into a buffer, a flush to steps.csv every 256 rows or 5 s,
and the capture state machine. This calls that hook N times on a real Agent writing a real
steps.csv (no window due) and prints microseconds per call beside the step times of the H200
validation jobs. Run-to-run noise on the H200 (about +-10% between whole runs) is far above
1%, so this direct figure is what bounds the agent's cost. NVML and psutil sampling run in the
launcher, outside the job: their cost is CPU on another core (0.16 cores of 16 while a job ran,
docs/validation.md).

Usage (from a clone; the hook is measured against a real torch module):
    pip install -e . torch
    python bench/bench_agent_hook.py [N]
"""

import os
import statistics
import sys
import tempfile
import time


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    with tempfile.TemporaryDirectory() as d:
        os.environ.update({"GPUCHECKUP_SKIP": "100000000", "GPUCHECKUP_CONTROL": "0"})
        from gpucheckup.capture import agent as agent_mod
        from gpucheckup.capture.agent.steplog import StepLog
        from gpucheckup.capture.safe_dir import RunDirectory

        import torch

        rd = RunDirectory.existing(d)  # the agent writes relative to the run directory's descriptor
        a = agent_mod.Agent(rd)
        a.passive = False
        a.torch = torch  # as activate() sets it once the job imports torch
        a.steplog = StepLog(rd, a.files["steps"])
        opt = object()
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n // 5):
                a._on_step(opt, (), {})
            runs.append((time.perf_counter() - t) / (n // 5) * 1e6)
        a.steplog.flush()
        us = statistics.median(runs)
        rows = sum(1 for _ in open(os.path.join(d, a.steplog.part))) - 1
    print(f"agent step hook: {us:.2f} us per step (median of 5 x {n // 5} calls; {rows} rows in steps.csv; "
          f"errors logged: {a.error_count})")
    print(f"{'job (H200, unprofiled step)':<36}{'step ms':>10}{'hook share':>12}")
    for job, ms in (("launch-bound (24 small MLP blocks)", 11.46), ("GPU-bound bf16 transformer", 10.96),
                    ("input-bound ResNet (num_workers=0)", 541.7)):
        print(f"{job:<36}{ms:>10.2f}{100 * us / 1000 / ms:>11.3f}%")
    return 0 if a.error_count == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
