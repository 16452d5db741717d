"""The light window's cost inside one process, paired: a job's steps plain, under the window's recorder, under py-spy
sampling from outside, and under both, in a rotated order within every cycle.

Why: the in-run figures of docs/validation.md 6c compare a window with the steps before it in one run, and this
machine's host speed drifts by up to +-30% between phases a second apart, so one run says little (launch-bound: -6.9 to
+40.5% over 9 runs). Here every cycle runs the four modes back to back, each for a few hundred ms, so a drift slower
than a cycle cancels in the ratios to the cycle's own plain phase.
Modes (each a phase of STEPS timed steps of the job, sync to sync, and the median of its step intervals):
  plain   the job alone
  cupti   agent/cupti_window.CuptiWindow as shipped (kernels, copies, memsets, synchronizations; CUPTI detached at
          stop), its host ranges on (HostRanges: the optimizer's and the DataLoader's wrappers), step() after every
          step, as the agent drives it; one warm-up step after start() is not timed (the agent's warm-up step)
  spy     py-spy sampling this process from outside, with the launcher's own command line (capture/sampler.py:
          record --nonblocking --idle --threads --rate HZ); LEAD_S of untimed steps after its spawn (it attaches in
          ~0.1 s), stopped with SIGINT after the phase (it writes its trace while the next phase has not begun)
  both    spy and cupti together: the light window as `gpucheckup run --light` runs it
  syncs   cupti with CUPTI's synchronization records (`--light-syncs`; the shipped default until 6e)
  kern    cupti with kernels only (no copies, memsets, synchronizations)
Jobs: light_ab's launch-bound MLP (`mlp`) and bf16 transformer (`tf`), the models of validation/cupti_cost.py.
Usage (device machine; PYTHONPATH with gpucheckup's src and cupti-python; py-spy on PATH):
  python3 validation/light_paired.py OUT.json [--jobs mlp,tf] [--seconds-per-job 110] [--hz 100]
      [--modes plain,cupti,...]
Writes OUT.json (every phase) and prints, per job and mode, the median change against plain with its quartiles.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cupti_cost import jobs  # noqa: E402 - the same two models as the mechanism measurement

MODES = ("plain", "cupti", "spy", "both")  # the default modes; --modes picks others
# mode -> (activity kinds, None: the window's own cupti_window.ACTIVITIES; synchronization records)
WINDOW_KINDS = {"cupti": (None, False), "both": (None, False), "syncs": (None, True),
                "kern": (("CONCURRENT_KERNEL",), False)}
STEPS = {"mlp": 40, "tf": 25}  # timed steps per phase: ~0.3 s each on the H200
LEAD_S = 0.4  # untimed steps after py-spy's spawn: it attaches in ~0.1 s (docs/capture.md)


def timed(torch, step, n: int, window) -> tuple[float, float]:
    """(ms per step from sync to sync, median ms between step ends) over n steps; window.step() after each."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ends = [t0]
    for _ in range(n):
        step()
        if window is not None:
            window.step()
        ends.append(time.perf_counter())
    torch.cuda.synchronize()
    block = (time.perf_counter() - t0) / n * 1000.0
    return block, statistics.median((b - a) * 1000.0 for a, b in zip(ends, ends[1:]))


def spawn_spy(py_spy: str, hz: float, out: str) -> subprocess.Popen:
    """py-spy on this process, as the launcher's host sampler spawns it."""
    cmd = [py_spy, "record", "--pid", str(os.getpid()), "--format", "chrometrace", "--output", out,
           "--rate", f"{hz:g}", "--idle", "--nonblocking", "--threads"]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_spy(proc: subprocess.Popen, out: str) -> int:
    """SIGINT, wait for the trace; the samples it wrote (0 when none)."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    try:
        with open(out) as f:
            n = sum(1 for e in json.load(f) if e.get("ph") in ("B", "X"))
        os.unlink(out)
        return n
    except (OSError, ValueError):
        return 0


def phase(torch, cw, cupti, step, n: int, mode: str, py_spy: str, hz: float, tmp: str) -> dict:
    """One phase of a mode: its timed steps and what the recorders got."""
    fig: dict = {"mode": mode}
    spy = None
    if mode in ("spy", "both"):
        out = os.path.join(tmp, f"spy-{time.monotonic_ns()}.json")
        spy = spawn_spy(py_spy, hz, out)
        t_end = time.perf_counter() + LEAD_S
        while time.perf_counter() < t_end:
            step()
    window = None
    if mode in WINDOW_KINDS:
        kinds, syncs = WINDOW_KINDS[mode]
        shipped = cw.ACTIVITIES
        if kinds is not None:
            cw.ACTIVITIES = kinds
        try:
            window = cw.CuptiWindow(torch, cupti, syncs=syncs)
        finally:
            cw.ACTIVITIES = shipped
        window.host.on()
        window.start()
        step()  # the agent's warm-up step after start()
        window.step()
    try:
        fig["block_ms"], fig["median_ms"] = timed(torch, step, n, window)
    finally:
        if window is not None:
            window.stop()
            window.host.off()
            fig["records"] = window.summary()["records"]
            fig["detached"] = window.detached
        if spy is not None:
            fig["samples"] = stop_spy(spy, out)
    return fig


def summary(cycles: list[list[dict]], modes=MODES) -> dict:
    """Per mode: the change of its block and median step against the same cycle's plain phase, % (median, quartiles)."""
    def q(v):
        v = sorted(v)
        return {"median": round(statistics.median(v), 2), "q1": round(v[len(v) // 4], 2),
                "q3": round(v[(3 * len(v)) // 4], 2), "n": len(v)} if v else None

    out = {}
    for mode in modes:
        rows = [(next(p for p in c if p["mode"] == "plain"), next(p for p in c if p["mode"] == mode)) for c in cycles]
        out[mode] = {"block_ms": q([m["block_ms"] for _, m in rows]), "median_ms": q([m["median_ms"] for _, m in rows]),
                     "block_pct": q([100 * (m["block_ms"] / p["block_ms"] - 1) for p, m in rows]),
                     "median_pct": q([100 * (m["median_ms"] / p["median_ms"] - 1) for p, m in rows])}
    return out


def print_summary(s: dict, modes) -> None:
    """Each mode's block and median step against plain (median and quartiles over cycles), and plain's block."""
    for mode in modes[1:]:
        m = s.get(mode)
        if m:
            print(f"  {mode:6s} block {m['block_pct']['median']:+.1f}% (q {m['block_pct']['q1']:+.1f}.."
                  f"{m['block_pct']['q3']:+.1f}), median step {m['median_pct']['median']:+.1f}% "
                  f"(q {m['median_pct']['q1']:+.1f}..{m['median_pct']['q3']:+.1f}), n {m['block_pct']['n']}")
    if s.get("plain"):
        print(f"  plain block {s['plain']['block_ms']['median']:.2f} ms (q {s['plain']['block_ms']['q1']:.2f}.."
              f"{s['plain']['block_ms']['q3']:.2f})")


def run_job(torch, cw, cupti, name: str, seconds: float, py_spy: str, hz: float, partial: str,
            modes=MODES) -> dict:
    step = jobs(torch)[name]
    for _ in range(10):
        step()
    cycles, errors = [], []
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory() as tmp:
        i = 0
        while time.monotonic() < deadline:
            k = i % len(modes)
            order = modes[k:] + modes[:k]
            try:
                cycles.append([phase(torch, cw, cupti, step, STEPS[name], m, py_spy, hz, tmp) for m in order])
            except Exception as e:  # noqa: BLE001 - the cycles so far still count
                errors.append(f"cycle {i}: {type(e).__name__}: {e}")
                break
            i += 1
            if i % 8 == 0:
                with open(partial, "w") as f:
                    json.dump({"job": name, "cycles": cycles}, f)
    return {"job": name, "steps_per_phase": STEPS[name], "hz": hz, "cycles": cycles, "errors": errors,
            "summary": summary(cycles, modes) if cycles else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--jobs", default="mlp,tf")
    p.add_argument("--seconds-per-job", type=float, default=110.0)
    p.add_argument("--hz", type=float, default=100.0)
    p.add_argument("--modes", default=",".join(MODES), help="plain first, then any of cupti, spy, both, syncs, kern")
    a = p.parse_args()
    import torch

    from gpucheckup.capture.agent import cupti_window as cw

    cupti = cw.load_cupti()
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        sys.exit("py-spy is not on PATH")
    results = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "jobs": []}
    for name in a.jobs.split(","):
        modes = tuple(a.modes.split(","))
        r = run_job(torch, cw, cupti, name, a.seconds_per_job, py_spy, a.hz, a.out + ".partial", modes)
        results["jobs"].append(r)
        with open(a.out, "w") as f:
            json.dump(results, f)
        print(f"{name}: {len(r['cycles'])} cycles, errors {r['errors']}")
        print_summary(r["summary"] or {}, modes)


if __name__ == "__main__":
    main()
