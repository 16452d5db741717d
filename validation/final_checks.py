"""Last H200 checks: the ceilings' burst method, the profiler-overhead correction end to end under
`gpucheckup run`, and what the launcher's telemetry costs in CPU.

python3 validation/final_checks.py OUT   (device machine, repo root, PYTHONPATH with gpucheckup)
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

from gpucheckup.document import decode, flat_report

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
py = sys.executable
here = Path(__file__).resolve().parent

# 1. ceilings
subprocess.run([py, "-m", "gpucheckup", "ceilings", "--out", str(out / "ceilings.json")], check=False)
c = json.loads((out / "ceilings.json").read_text())
ref = {"bf16": 797.2}
print(f"ceilings: matmul {c['matmul_tflops']}, sustained {c.get('matmul_sustained_tflops')}, copies {c['copy_gb_s']}")
print(f"bf16 burst {c['matmul_tflops']['bf16']:.1f} vs reference 797.2: "
      f"{100 * (c['matmul_tflops']['bf16'] / ref['bf16'] - 1):+.1f}%")

# 2. gpucheckup run on a GPU-bound job the profiler makes look launch-bound; launcher CPU cost
cmd = [py, "-m", "gpucheckup", "run", "--out", str(out / "runs"), "--name", "gpu_bound", "--flops",
       "--record-shapes", "--json", str(out / "gpu_bound.json"), "--", py, str(here / "train_gpu_bound.py"),
       "--steps", "150"]
t0 = time.time()
launcher = subprocess.Popen(cmd, stdout=open(out / "gpu_bound.txt", "w"), stderr=subprocess.STDOUT)
proc = psutil.Process(launcher.pid)
cpu, job_wall, job_start = None, None, None
while launcher.poll() is None:
    try:
        if proc.children():  # the job runs: the launcher's own CPU is telemetry (the job is a child)
            t = proc.cpu_times()
            cpu = t.user + t.system
            job_start = job_start or time.time()
            job_wall = time.time() - job_start
    except psutil.Error:
        pass
    time.sleep(0.2)
r = flat_report(decode((out / "gpu_bound.json").read_bytes()))
p = r.get("profiler") or {}
print(f"gpucheckup run train_gpu_bound.py: exit {launcher.returncode}, verdict {r['verdict']['primary']} "
      f"({r['verdict']['reason']}); traced busy {r['gpu']['busy_pct']:.1f}%, unprofiled busy "
      f"{p.get('busy_pct_unprofiled')}, traced step {p.get('traced_step_ms')} ms, unprofiled "
      f"{p.get('unprofiled_step_ms')} ms; MFU {r['mfu']['pct']} ({r['mfu']['source']})")
print(f"launcher CPU while the job ran (start-up, NVML at 10 Hz, psutil at 1 Hz): {cpu:.2f} s over {job_wall:.1f} s "
      f"= {cpu / job_wall:.3f} cores of {psutil.cpu_count()}")
