"""Where a CUPTI light window's cost comes from, by mechanism: the host's time per launched op, the GPU's time per
kernel, the host's time per copy, before / inside / after a window, for each recorder configuration.

Every configuration runs in a fresh process (a CUPTI or Kineto state left behind must not leak into the next one):
  none        cupti-python loaded (CUPTI initialised: cupti.get_timestamp), nothing enabled
  kmm         agent/cupti_window.CuptiWindow (CONCURRENT_KERNEL, MEMCPY, MEMSET), CUPTI left attached after it (the
              window's stop() detaches since docs/validation.md 6c: here that detach is skipped)
  kern        the same with CONCURRENT_KERNEL only
  kmm_ovh     kmm plus CUPTI's OVERHEAD records (what CUPTI says it spent, by kind)
  kmm_fin     kmm, then cupti.finalize() after each window (CUPTI detached; the next window attaches again): the
              light window as shipped since 6c
  kmm_shared  kmm with ATTR_PER_THREAD_BUFFER flipped from CUPTI's default (one buffer for all threads, or per thread)
  kineto      torch.profiler with CUDA activities only (the torch.profiler light window's GPU side)
  kineto_td   the same with TEARDOWN_CUPTI=1 in the process's environment (Kineto calls cuptiFinalize at stop)
  paired      windows of ~0.1 s opened and closed CYCLES times in one process, three kinds in turn: A (kmm), B (kmm,
              then cupti.finalize()), C (kern); in each cycle the same work runs inside the window and just after it,
              so a slow drift of the host's speed (seen on the H200: +-30% between phases a second apart) cancels in
              the pairs: host us per op and per copy, the MLP's and the transformer's step, on and off (A and C skip
              the window's own detach, B is the window as shipped since 6c)
Phases: before (nothing loaded), w1 (first window), a1 (after it), w2 (a second window), a2 (after it).
Measures in each phase (medians of REPS repetitions):
  host_us     host time per `x.add_(1)` on a 256-float tensor: N_HOST ops timed after a synchronize, none at the
              end (the launch queue never fills, so this is what one op costs the host: dispatch + launch)
  copy_us     host time per 4 KiB device-to-device `copy_` (cudaMemcpyAsync: a MEMCPY record)
  gpu_us      GPU time per tiny kernel: N_GPU `x.add_(1)` queued behind a ~25 ms `torch.cuda._sleep`, timed with CUDA
              events, so the GPU runs them back to back (the host enqueued them all while it slept: checked)
  gpu_mm_us   GPU time per 2048^2 bf16 matmul, queued the same way
  mlp_ms      one training step of light_ab's launch-bound job (train_launch_bound.py's model: 24 fp32 MLP blocks,
              AdamW; backward on autograd's own thread): STEPS_MLP steps between two synchronizes, per step
  tf_ms       one step of its GPU-bound job (train_gpu_bound.py's 4-layer bf16 transformer, fused AdamW), the same way
Usage (device machine; PYTHONPATH with gpucheckup's src and cupti-python):
  python3 validation/cupti_cost.py OUT.json [--configs none,kmm,...] [--deadline-s S]
Writes OUT.json (every figure) and prints one table row per configuration and phase.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = ("paired", "none", "kmm", "kmm_fin", "kineto", "kineto_td", "kern", "kmm_ovh", "kmm_shared")  # by priority
CYCLES = 45  # paired: windows opened and closed, kinds A, B, C in turn
PHASES = ("before", "w1", "a1", "w2", "a2")
N_HOST, N_COPY, N_GPU, N_MM = 600, 300, 600, 200
REPS_HOST, REPS_GPU = 9, 5
STEPS_MLP, STEPS_TF, REPS_STEP = 10, 6, 3
SLEEP_CYCLES = 50_000_000  # torch.cuda._sleep: ~25 ms at the H200's 1.98 GHz


def jobs(torch) -> dict:
    """The two validation jobs' training steps (their models, made once per process), as functions."""
    from torch import nn

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_launch_bound import Block  # the launch-bound job's own block

    dev = torch.device("cuda")
    torch.manual_seed(0)

    mlp = nn.Sequential(*[Block(512) for _ in range(24)], nn.Linear(512, 10)).to(dev)
    mlp_opt = torch.optim.AdamW(mlp.parameters(), lr=1e-3)

    def mlp_step():
        x = torch.randn(64, 512, device=dev)
        y = torch.randint(0, 10, (64,), device=dev)
        loss = nn.functional.cross_entropy(mlp(x), y)
        mlp_opt.zero_grad(set_to_none=True)
        loss.backward()
        mlp_opt.step()

    layer = nn.TransformerEncoderLayer(1024, 8, 4096, dropout=0.0, batch_first=True)
    tf = nn.Sequential(nn.TransformerEncoder(layer, 4, enable_nested_tensor=False),
                       nn.Linear(1024, 8192, bias=False)).to(dev)
    tf_opt = torch.optim.AdamW(tf.parameters(), lr=1e-4, fused=True)
    xt = torch.randn(8, 1024, 1024, device=dev)

    def tf_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = tf(xt).float().square().mean()
        loss.backward()
        tf_opt.step()
        tf_opt.zero_grad(set_to_none=True)

    return {"mlp": mlp_step, "tf": tf_step}


def measure(torch, steps: dict | None = None) -> dict:
    """One phase's figures (see the module docstring)."""
    dev = torch.device("cuda")
    x = torch.zeros(256, device=dev)
    src, dst = torch.ones(1024, device=dev), torch.empty(1024, device=dev)
    a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    c = torch.empty(2048, 2048, device=dev, dtype=torch.bfloat16)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def host(fn, n, reps):
        out = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            out.append((time.perf_counter_ns() - t0) / n / 1000.0)
        torch.cuda.synchronize()
        return statistics.median(out), out

    def gpu(fn, n, reps):
        out, enq = [], []
        for _ in range(reps):
            torch.cuda.synchronize()
            torch.cuda._sleep(SLEEP_CYCLES)
            e0.record()
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            enq.append((time.perf_counter_ns() - t0) / 1e6)
            e1.record()
            torch.cuda.synchronize()
            out.append(e0.elapsed_time(e1) * 1000.0 / n)
        return statistics.median(out), out, max(enq)

    def tiny():
        x.add_(1.0)

    def copy():
        dst.copy_(src)

    def mm():
        torch.mm(a, b, out=c)

    torch.cuda.synchronize()
    e0.record()
    torch.cuda._sleep(SLEEP_CYCLES)
    e1.record()
    torch.cuda.synchronize()
    sleep_ms = e0.elapsed_time(e1)
    h, h_all = host(tiny, N_HOST, REPS_HOST)
    cp, cp_all = host(copy, N_COPY, REPS_HOST)
    g, g_all, g_enq = gpu(tiny, N_GPU, REPS_GPU)
    m, m_all, m_enq = gpu(mm, N_MM, max(REPS_GPU - 2, 1))
    out = {"host_us": h, "copy_us": cp, "gpu_us": g, "gpu_mm_us": m, "host_all": h_all, "copy_all": cp_all,
           "gpu_all": g_all, "mm_all": m_all, "sleep_ms": sleep_ms, "enqueue_ms_max": max(g_enq, m_enq),
           "queued_behind_sleep": max(g_enq, m_enq) < sleep_ms}
    for name, n in (("mlp", STEPS_MLP), ("tf", STEPS_TF)):
        if steps and name in steps:
            out[f"{name}_ms"] = sync_steps(torch, steps[name], n, REPS_STEP, out, name)
    return out


def sync_steps(torch, fn, n: int, reps: int, out: dict, name: str) -> float:
    """ms per step of `fn`: n steps between two synchronizes, median of reps."""
    per = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter_ns() - t0) / n / 1e6)
    out[f"{name}_all"] = per
    return statistics.median(per)


DETACH = []  # CuptiWindow's own _detach (cuptiFinalize after the window), kept before a configuration replaces it


def stay_attached(window) -> None:
    """A window's stop() that leaves CUPTI attached (the backend before docs/validation.md 6c)."""


def timed_detach(log):
    """A window's stop() that detaches CUPTI as shipped, and logs how long cuptiFinalize took."""
    from gpucheckup.capture.agent import cupti_window as cw

    if not DETACH:
        DETACH.append(cw.CuptiWindow._detach)

    def detach(window):
        t0 = time.perf_counter()
        DETACH[0](window)
        log(f"cupti.finalize() took {1000 * (time.perf_counter() - t0):.1f} ms (detached: {window.detached})")

    return detach


class Cupti:
    """A window of the light window's own recorder (CuptiWindow), with the configuration's changes."""

    def __init__(self, torch, config: str, log):
        from gpucheckup.capture.agent import cupti_window as cw

        self.cw = cw
        self.torch = torch
        self.config = config
        self.log = log
        self.cupti = cw.load_cupti()
        self.overhead: dict[str, list[float]] = {}
        self.windows: list[dict] = []
        cw.CuptiWindow._detach = timed_detach(log) if config == "kmm_fin" else stay_attached
        if config == "kern":
            cw.ACTIVITIES = ("CONCURRENT_KERNEL",)
        if config == "kmm_shared":
            self.attribute_flip()

    def attribute_flip(self) -> None:
        """Flip ATTR_PER_THREAD_BUFFER (read first: its size and CUPTI's default)."""
        import ctypes

        cu = self.cupti
        attr = cu.ActivityAttribute.ATTR_PER_THREAD_BUFFER
        val, size = ctypes.c_uint64(0), ctypes.c_size_t(8)
        cu.activity_get_attribute(attr, ctypes.addressof(size), ctypes.addressof(val))
        default = val.value
        new = ctypes.c_uint64(0 if default else 1)
        cu.activity_set_attribute(attr, ctypes.addressof(size), ctypes.addressof(new))
        check, size2 = ctypes.c_uint64(0), ctypes.c_size_t(8)
        cu.activity_get_attribute(attr, ctypes.addressof(size2), ctypes.addressof(check))
        self.log(f"ATTR_PER_THREAD_BUFFER: default {default} (size {size.value}), set {new.value}, now {check.value}")

    def start(self) -> None:
        self.win = self.cw.CuptiWindow(self.torch, self.cupti, self.log)
        if self.config == "kmm_ovh":
            real = self.win._completed

            def completed(activities, _real=real, _ovh=self.overhead, _k=self.cupti.ActivityKind.OVERHEAD):
                rest = []
                for act in activities:
                    if act.kind == _k:
                        try:
                            name = self.cupti.ActivityOverheadKind(act.overhead_kind).name
                        except ValueError:
                            name = str(act.overhead_kind)
                        _ovh.setdefault(name, []).append((act.end - act.start) / 1000.0)
                    else:
                        rest.append(act)
                _real(rest)

            self.win._completed = completed
        self.win.start()
        if self.config == "kmm_ovh":
            self.cupti.activity_enable(self.cupti.ActivityKind.OVERHEAD)

    def stop(self) -> None:
        if self.config == "kmm_ovh":
            self.cupti.activity_disable(self.cupti.ActivityKind.OVERHEAD)
        self.win.stop()
        self.windows.append(self.win.summary())


class Kineto:
    """A torch.profiler window of CUDA activities only."""

    def __init__(self, torch, config: str, log):
        self.torch = torch
        self.windows: list[dict] = []
        self.overhead: dict = {}

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.prof = profile(activities=[ProfilerActivity.CUDA])
        self.prof.start()

    def stop(self) -> None:
        self.prof.stop()
        try:
            n = sum(1 for e in self.prof.events() if "CUDA" in str(e.device_type))
        except Exception as e:  # noqa: BLE001 - the count is a check, not a figure
            n = f"{type(e).__name__}: {e}"
        self.windows.append({"cuda_events": n})


def paired(torch, partial: str | None) -> dict:
    """The `paired` configuration: short windows of kinds A, B, C in turn, the same work inside and just after each."""
    from gpucheckup.capture.agent import cupti_window as cw

    cupti = cw.load_cupti()
    detach = timed_detach(lambda msg: None)
    dev = torch.device("cuda")
    x = torch.zeros(256, device=dev)
    src, dst = torch.ones(1024, device=dev), torch.empty(1024, device=dev)
    steps = jobs(torch)
    for fn in steps.values():
        for _ in range(3):
            fn()

    def ops(fn, n):
        for _ in range(30):  # not timed: the first ops after a window opens or closes
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        us = (time.perf_counter_ns() - t0) / n / 1000.0
        torch.cuda.synchronize()
        return us

    def run():
        fig = {"host_us": ops(lambda: x.add_(1.0), 400), "copy_us": ops(lambda: dst.copy_(src), 200)}
        for name, n in (("mlp", 2), ("tf", 2)):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(n):
                steps[name]()
            torch.cuda.synchronize()
            fig[f"{name}_ms"] = (time.perf_counter_ns() - t0) / n / 1e6
        return fig

    kinds = {"A": ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET"), "B": ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET"),
             "C": ("CONCURRENT_KERNEL",)}
    out = {"config": "paired", "cycles": [], "errors": [], "log": []}
    for i in range(CYCLES):
        kind = "ABC"[i % 3]
        try:
            cw.ACTIVITIES = kinds[kind]
            cw.CuptiWindow._detach = detach if kind == "B" else stay_attached
            w = cw.CuptiWindow(torch, cupti, out["log"].append)
            w.start()
            on = run()
            w.stop()
            off = run()
            out["cycles"].append({"kind": kind, "on": on, "off": off, "records": w.summary()["records"]})
        except Exception as e:  # noqa: BLE001 - the cycles measured so far still count
            out["errors"].append(f"cycle {i} ({kind}): {type(e).__name__}: {e}")
            break
        if partial and i % 6 == 5:
            with open(partial, "w") as f:
                json.dump(out, f)
    out["summary"] = paired_summary(out["cycles"])
    return out


def paired_summary(cycles: list[dict]) -> dict:
    """Per kind: medians of on - off (host us per op, per copy) and on / off - 1 (steps, %), with their quartiles;
    and the off figures after A (CUPTI left attached) against those after B (detached), cycle by neighbouring cycle."""
    def q(v):
        v = sorted(v)
        if not v:
            return None
        return {"median": round(statistics.median(v), 3), "q1": round(v[len(v) // 4], 3),
                "q3": round(v[(3 * len(v)) // 4], 3), "n": len(v)}

    out = {}
    for kind in "ABC":
        cs = [c for c in cycles if c["kind"] == kind]
        out[kind] = {"host_us_on_minus_off": q([c["on"]["host_us"] - c["off"]["host_us"] for c in cs]),
                     "copy_us_on_minus_off": q([c["on"]["copy_us"] - c["off"]["copy_us"] for c in cs]),
                     "host_us_off": q([c["off"]["host_us"] for c in cs]),
                     "mlp_pct": q([100 * (c["on"]["mlp_ms"] / c["off"]["mlp_ms"] - 1) for c in cs]),
                     "tf_pct": q([100 * (c["on"]["tf_ms"] / c["off"]["tf_ms"] - 1) for c in cs]),
                     "mlp_ms_off": q([c["off"]["mlp_ms"] for c in cs]), "tf_ms_off": q([c["off"]["tf_ms"] for c in cs])}
    # A's off phase (attached, nothing enabled) against the next B's off phase (detached): neighbours in time
    pairs = [(a, b) for a, b in zip(cycles, cycles[1:]) if a["kind"] == "A" and b["kind"] == "B"]
    out["attached_vs_detached"] = {
        "host_us": q([a["off"]["host_us"] - b["off"]["host_us"] for a, b in pairs]),
        "mlp_pct": q([100 * (a["off"]["mlp_ms"] / b["off"]["mlp_ms"] - 1) for a, b in pairs]),
        "tf_pct": q([100 * (a["off"]["tf_ms"] / b["off"]["tf_ms"] - 1) for a, b in pairs])}
    return out


def child(config: str, partial: str | None = None) -> dict:
    """One configuration, in this process: the phases in order (each phase's figures written to `partial` as they
    come, so a process that dies mid-way still leaves what it measured)."""
    import torch

    from gpucheckup.capture.agent.cupti_window import preload_libcupti

    if config == "paired":
        return paired(torch, partial)
    log_lines: list[str] = []
    out = {"config": config, "phases": {}, "log": log_lines, "errors": []}
    def keep(phase, figures):
        out["phases"][phase] = figures
        if partial:
            with open(partial, "w") as f:
                json.dump(out, f)

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    steps = jobs(torch)
    for fn in steps.values():
        for _ in range(3):
            fn()
    measure(torch, steps)  # warm-up: kernels loaded, cuBLAS handle made, allocator warm
    keep("before", measure(torch, steps))
    if config.startswith("kineto"):
        preload_libcupti()
        rec = Kineto(torch, config, log_lines.append)
    else:
        rec = Cupti(torch, config, log_lines.append)
    for w, a in (("w1", "a1"), ("w2", "a2")):
        try:
            if config != "none":
                rec.start()
            keep(w, measure(torch, steps))
            if config != "none":
                rec.stop()
            keep(a, measure(torch, steps))
        except Exception as e:  # noqa: BLE001 - the phases measured so far still count
            out["errors"].append(f"{w}: {type(e).__name__}: {e}")
            break
    out["windows"] = rec.windows
    out["overhead_us"] = {k: {"n": len(v), "sum_ms": round(sum(v) / 1000.0, 3),
                              "median_us": statistics.median(v)} for k, v in rec.overhead.items()}
    return out


def partial_of(path: str, config: str, error: str) -> dict:
    """What a configuration's process measured before it failed, with the error."""
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError):
        r = {"config": config}
    r["error"] = error
    return r


def table(results: list[dict]) -> str:
    rows = ["| config | phase | host us/op | copy us/op | GPU us/tiny kernel | GPU us/matmul | MLP step ms | TF step ms "
            "| d host us | d GPU us | d MLP | d TF |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        ph = r.get("phases") or {}
        base = ph.get("before")
        for name in PHASES:
            p = ph.get(name)
            if not p:
                continue
            dh = f"{p['host_us'] - base['host_us']:+.2f}" if base else "-"
            dg = f"{p['gpu_us'] - base['gpu_us']:+.2f}" if base else "-"

            def rel(k, p=p):
                return f"{100 * (p[k] / base[k] - 1):+.1f}%" if base and p.get(k) and base.get(k) else "-"

            def ms(k, p=p):
                return f"{p[k]:.2f}" if p.get(k) else "-"

            rows.append(f"| {r['config']} | {name} | {p['host_us']:.2f} | {p['copy_us']:.2f} | {p['gpu_us']:.2f} | "
                        f"{p['gpu_mm_us']:.1f} | {ms('mlp_ms')} | {ms('tf_ms')} | {dh} | {dg} | {rel('mlp_ms')} | "
                        f"{rel('tf_ms')} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--deadline-s", type=float, default=120.0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.out)))
        return
    t_end = time.time() + a.deadline_s
    results = []
    for config in a.configs.split(","):
        left = t_end - time.time()
        if left < 10:
            results.append({"config": config, "error": "not run: the deadline"})
            continue
        env = dict(os.environ)
        if config == "kineto_td":
            env["TEARDOWN_CUPTI"] = "1"
        else:
            env.pop("TEARDOWN_CUPTI", None)
        t0 = time.time()
        partial = f"{a.out}.{config}.part"
        try:
            p = subprocess.run([sys.executable, __file__, partial, "--child", config], capture_output=True, text=True,
                               timeout=min(left, 90), env=env)
            last = (p.stdout.strip().splitlines() or [""])[-1]
            r = json.loads(last) if last.startswith("{") else partial_of(partial, config, f"rc {p.returncode}")
            if p.returncode:
                r["rc"] = p.returncode
                r["stderr"] = p.stderr[-1500:]
        except (subprocess.TimeoutExpired, ValueError) as e:
            r = partial_of(partial, config, f"{type(e).__name__}: {e}")
        try:
            os.unlink(partial)
        except OSError:
            pass
        r["wall_s"] = round(time.time() - t0, 1)
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "phases"})[:600], flush=True)
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    print(table(results), flush=True)
    for r in results:
        if r.get("summary"):
            print(json.dumps(r["summary"], indent=1), flush=True)


if __name__ == "__main__":
    main()
