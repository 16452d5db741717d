#!/usr/bin/env bash
# Validate issue 5 on the H200 machine. Run from the repo root with gpucheckup importable:
#   pip install --no-deps --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:src
#   OUT=/some/dir bash validation/h200_ceilings.sh
# Steps (each bounded by `timeout`, about 2 minutes in all), results under $OUT, verdicts in $OUT/summary.txt:
#  1. gpucheckup ceilings -> $OUT/ceilings.json, compared with the session's reference figures
#     (shared/fixtures/h200/ceilings.json: bf16 797.2 TFLOP/s, d2d 4.29 TB/s, pinned 54.3 GB/s,
#     pageable 15.7 GB/s): PASS within 5%.
#  2. a small bf16 transformer (workload.py, written below): FlopCounterMode FLOPs of one step,
#     unprofiled step time, then a profiled run (record_shapes + with_flops) saved as a run
#     directory with flops.json, as the capture agent writes it.
#  3. gpucheckup analyze on that run directory with the measured ceilings: MFU from the agent's
#     FLOPs, against the datasheet and the measured ceiling; shape and annotation FLOPs against
#     FlopCounterMode.
#  4. if ncu is installed: the command `gpucheckup ncu-cmd` prints, run on the workload, and a
#     `--page raw` run; both CSVs imported with `analyze --ncu`.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
T0=$(date +%s)
say() { echo "$*" | tee -a "$SUMMARY"; }
say "gpucheckup issue-5 validation, $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# ---- the workload ---------------------------------------------------------------------------
cat > "$OUT/workload.py" <<'PY'
"""A small bf16 transformer training step. --plain --steps N: just train (for ncu).
Default: FlopCounterMode FLOPs of one step, unprofiled step time, then a profiled run directory."""
import argparse, gzip, json, os, time
from pathlib import Path
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.flop_counter import FlopCounterMode

p = argparse.ArgumentParser()
p.add_argument("--plain", action="store_true")
p.add_argument("--steps", type=int, default=8)
p.add_argument("--out", type=Path)
a = p.parse_args()
torch.manual_seed(0)
D, L, H, B, S, V = 1024, 4, 8, 8, 1024, 8192
layer = torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, L, enable_nested_tensor=False),
                            torch.nn.Linear(D, V, bias=False)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randn(B, S, D, device="cuda")

def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

for _ in range(3):
    step()
torch.cuda.synchronize()
if a.plain:
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    raise SystemExit(0)
with FlopCounterMode(display=False) as fc:
    step()
flops = fc.get_total_flops()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(10):
    step()
torch.cuda.synchronize()
step_s = (time.perf_counter() - t) / 10
run = a.out
(run / "traces").mkdir(parents=True, exist_ok=True)
tmp = run / "traces" / "trace_rank0.json"
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, with_flops=True,
             schedule=schedule(wait=1, warmup=2, active=5),
             on_trace_ready=lambda prof: prof.export_chrome_trace(str(tmp))) as prof:
    for _ in range(8):
        step()
        prof.step()
(run / "traces" / "trace_rank0.json.gz").write_bytes(gzip.compress(tmp.read_bytes()))
tmp.unlink()
(run / "flops.json").write_text(json.dumps({"flops_per_step": flops, "how": "FlopCounterMode over one step"}))
params = sum(q.numel() for q in model.parameters())
(run.parent / "workload_meta.json").write_text(json.dumps({
    "flops_per_step": flops, "step_s_unprofiled": step_s, "params": params, "tokens_per_step": B * S,
    "config": {"d": D, "layers": L, "heads": H, "batch": B, "seq": S, "vocab": V},
    "device": torch.cuda.get_device_name(), "torch": torch.__version__}, indent=1))
print(f"flops/step {flops:.4g}, unprofiled step {step_s * 1000:.2f} ms")
PY

# ---- 1. ceilings -------------------------------------------------------------------------------
say "== 1. gpucheckup ceilings"
timeout 100 "$PY" -m gpucheckup ceilings --out "$OUT/ceilings.json" > "$OUT/ceilings.txt" 2> "$OUT/ceilings.stderr"
say "ceilings exit $? ($(( $(date +%s) - T0 )) s so far)"
"$PY" - "$OUT/ceilings.json" <<'PY' | tee -a "$SUMMARY"
import json, sys
ref = {("matmul_tflops", "bf16"): 797.2, ("copy_gb_s", "d2d"): 4290.0, ("copy_gb_s", "h2d_pinned"): 54.3,
       ("copy_gb_s", "h2d_pageable"): 15.7}
try:
    c = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL ceilings.json unreadable: {e}"); raise SystemExit(0)
for (group, key), want in ref.items():
    got = c.get(group, {}).get(key)
    if got is None:
        print(f"FAIL {group}.{key}: not measured ({c.get('skipped', {}).get(key)})"); continue
    dev = 100 * (got / want - 1)
    print(f"{'PASS' if abs(dev) <= 5 else 'FAIL'} {group}.{key} = {got:.1f} vs reference {want} ({dev:+.1f}%)")
print("other: " + ", ".join(f"{k} {v:.1f}" for k, v in c.get("matmul_tflops", {}).items()) +
      f"; skipped: {c.get('skipped')}")
PY

# ---- 2. workload and run directory -----------------------------------------------------------
say "== 2. workload capture"
rm -rf "$OUT/run"
timeout 80 "$PY" "$OUT/workload.py" --out "$OUT/run" > "$OUT/workload.txt" 2>&1
say "workload exit $?: $(tail -1 "$OUT/workload.txt") ($(( $(date +%s) - T0 )) s so far)"

# ---- 3. analyze the run directory ---------------------------------------------------------------
say "== 3. analyze run directory"
"$PY" -m gpucheckup analyze "$OUT/run" --ceilings "$OUT/ceilings.json" --json "$OUT/run_report.json" \
    > "$OUT/run_report.txt" 2>&1
say "analyze exit $?"
"$PY" -m gpucheckup analyze src/gpucheckup/data/demo/compute_bound/trace.json.gz --ceilings "$OUT/ceilings.json" \
    --flops-per-step 53721450938368 --json "$OUT/compute_bound_report.json" --quiet > /dev/null 2>&1
"$PY" - "$OUT" <<'PY' | tee -a "$SUMMARY"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
try:
    r, meta = json.loads((out / "run_report.json").read_text()), json.loads((out / "workload_meta.json").read_text())
except Exception as e:
    print(f"FAIL no run report: {e}"); raise SystemExit(0)
m = r["mfu"]
f = meta["flops_per_step"]
ok = lambda c: "PASS" if c else "FAIL"
print(f"{ok(m['source'] == 'agent' and m['flops_per_step'] == f)} MFU source {m['source']} ({m['source_detail']}), "
      f"FLOPs/step {m['flops_per_step']}")
print(f"{ok(m['pct'] is not None and 0 < m['pct'] < 100)} MFU {m['pct']} % of {m['peak_tflops']} ({m['peak_from']}); "
      f"achieved {m['achieved_tflops']} TFLOP/s over a {r['steps']['median_ms']:.2f} ms median traced step "
      f"(unprofiled {meta['step_s_unprofiled'] * 1000:.2f} ms -> {100 * f / meta['step_s_unprofiled'] / 1e12 / 989.4:.1f}%)")
print(f"{ok(m['pct_of_measured'] is not None)} {m['pct_of_measured']} % of the measured {m['dtype']} ceiling "
      f"{m['measured_tflops']}")
est = m["estimates"]
for src in ("shapes", "annotations"):
    if src in est:
        ratio = est[src] / f
        good = abs(ratio - 1) <= 0.05 if src == "shapes" else True
        print(f"{ok(good)} {src} FLOPs/step {est[src]:.5g} = {ratio:.4f} x FlopCounterMode"
              + ("" if src == "shapes" else " (with_flops also counts elementwise mul/add; informational)"))
    else:
        print(f"FAIL no {src} estimate in the report")
print(f"GEMM dtypes {m['gemm_dtypes_pct']}; verdict {r['verdict']['primary']}; "
      f"findings {[x['id'] for x in r['verdict']['findings']]}")
for o in r["roofline"]["ops"][:3]:
    print(f"  roofline {o['op']} {o['shapes'][:2]} {o['dtype']} AI {o['intensity']:.0f} ridge {o['ridge']:.0f} "
          f"{o['expected']} achieved {o['achieved_tflops']}")
cb = json.loads((out / "compute_bound_report.json").read_text())["mfu"]
print(f"compute_bound demo trace: MFU {cb['pct']:.1f}% of datasheet, {cb['pct_of_measured']:.1f}% of measured "
      f"{cb['measured_tflops']:.1f}")
PY
say "($(( $(date +%s) - T0 )) s so far)"

# ---- 4. Nsight Compute --------------------------------------------------------------------------
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$NCU" ] || [ ! -f "$OUT/run_report.json" ]; then
    say "== 4. ncu: SKIPPED (ncu not found or no run report)"
else
    say "== 4. ncu ($NCU)"
    export PATH="$(dirname "$NCU"):$PATH"
    CMD=$("$PY" -m gpucheckup ncu-cmd "$OUT/run_report.json" --top 3 --skip-steps 2 \
          --command "$PY $OUT/workload.py --plain --steps 6")
    echo "$CMD" > "$OUT/ncu_cmd.txt"
    say "ncu-cmd: $CMD"
    (cd "$OUT" && eval "timeout 45 $CMD" > "$OUT/ncu_long.log" 2>&1)
    say "ncu (long form) exit $?"
    METRICS=$(echo "$CMD" | sed -E 's/.*--metrics ([^ ]+).*/\1/')
    (cd "$OUT" && timeout 40 "$NCU" --target-processes all --launch-skip 40 --launch-count 6 --metrics "$METRICS" \
        --clock-control none --csv --page raw "$PY" "$OUT/workload.py" --plain --steps 3 > "$OUT/ncu_raw.csv" 2> "$OUT/ncu_raw.log")
    say "ncu (--page raw) exit $?"
    for csv in ncu_top_kernels.csv ncu_raw.csv; do
        "$PY" -m gpucheckup analyze "$OUT/run" --ncu "$OUT/$csv" --json "$OUT/report_$csv.json" --quiet \
            > /dev/null 2> "$OUT/analyze_$csv.stderr"
        "$PY" - "$OUT/report_$csv.json" "$csv" "$OUT/analyze_$csv.stderr" <<'PY' | tee -a "$SUMMARY"
import json, sys
try:
    n = json.load(open(sys.argv[1]))["ncu"]
except Exception as e:
    print(f"FAIL {sys.argv[2]} not imported: {e}: {open(sys.argv[3]).read().strip()[:300]}"); raise SystemExit(0)
good = n["launches"] > 0 and n["matched_to_trace"] > 0
print(f"{'PASS' if good else 'FAIL'} {sys.argv[2]}: {n['launches']} launches, {n['kernel_names']} kernel names, "
      f"{n['matched_to_trace']} matched to the trace")
for k in n["kernels"][:4]:
    print(f"  {k['label'][:50]}: {k['bound']} (SM {k['sm_pct']}, memory {k['memory_pct']}, warps {k['warps_active_pct']}) "
          f"-> {'matched' if k['trace_name'] else 'NOT matched'}")
PY
    done
fi
say "done in $(( $(date +%s) - T0 )) s"
