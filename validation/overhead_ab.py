"""Why did jobs run faster under `gpucheckup run` than plainly? An A/B/C test on the H200.

Modes, each run in a fresh process, order rotated every round so that no mode is always first:
- plain: `python3 train_launch_bound.py`
- always_on: the same under `gpucheckup run --skip 1000000` (agent timing steps, NVML and psutil
  sampling in the launcher, no profiling window)
- plain_poller: plain, beside a separate process that polls NVML at 10 Hz and psutil at 1 Hz as
  the launcher does, without any agent in the job. If this mode is as fast as always_on, the
  speed-up comes from the polling (CPU cores kept out of deep idle states), not from the agent.
Prints the median step time of every run and the median per mode.
Usage (device machine, repo root, PYTHONPATH with gpucheckup): python3 validation/overhead_ab.py OUT ROUNDS
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
POLLER = """
import time, pynvml, psutil, os
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0); n = 0
while True:
    pynvml.nvmlDeviceGetUtilizationRates(h); pynvml.nvmlDeviceGetPowerUsage(h)
    pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM); pynvml.nvmlDeviceGetMemoryInfo(h)
    if n % 10 == 0:
        psutil.cpu_percent()
    n += 1
    time.sleep(0.1)
"""


def run(mode: str, work: Path, i: int) -> float:
    rep = work / f"{mode}_{i}.json"
    job = [sys.executable, str(HERE / "train_launch_bound.py"), "--steps", "400", "--warmup", "50",
           "--report", str(rep)]
    poller = None
    if mode == "always_on":
        cmd = [sys.executable, "-m", "gpucheckup", "run", "--out", str(work / "runs"), "--name", f"ab{i}",
               "--skip", "1000000", "--no-report", "--", *job]
    else:
        cmd = job
        if mode == "plain_poller":
            poller = subprocess.Popen([sys.executable, "-c", POLLER])
            time.sleep(1.0)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
    if poller:
        poller.kill()
        poller.wait()
    data = json.loads(rep.read_text())
    ms = data["step_ms"][data["warmup"]:]
    return statistics.median(ms)


def main() -> None:
    out = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    out.mkdir(parents=True, exist_ok=True)
    modes = ["plain", "always_on", "plain_poller"]
    results: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        for r in range(rounds):
            order = modes[r % 3:] + modes[: r % 3]
            for m in order:
                v = run(m, work, r)
                results[m].append(v)
                print(f"round {r + 1} {m}: {v:.3f} ms", flush=True)
    lines = ["| mode | median step ms per run | median |", "| --- | --- | --- |"]
    base = statistics.median(results["plain"])
    for m in modes:
        med = statistics.median(results[m])
        lines.append(f"| {m} | {', '.join(f'{x:.2f}' for x in results[m])} | {med:.3f} ({100 * (med / base - 1):+.1f}%) |")
    text = "\n".join(lines)
    print(text)
    (out / "overhead_ab.md").write_text(text + "\n")
    (out / "overhead_ab.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
