#!/bin/bash
# H200 checks of 2026-12-01 (run from the repo root of the device copy, .dev_light carried: wheels for msgspec and
# py-spy in whl/, cupti-python in whl_cupti/, cuda-bindings in whl_cb/). PART picks what runs:
#  call1: 1. the light window's cost paired in one process (validation/light_paired.py: plain / CUPTI window / py-spy /
#            both, rotated in every cycle) on the launch-bound MLP and the bf16 transformer (issue 15);
#         2. does pinning the job to 4 cores steady the host between processes? `ab` of the launch example against
#            itself under taskset (issue 10: the host's drift between processes is what the compile and graphs rows
#            could not resolve);
#         3. `ab` of the launch example's --compile with many rounds, pinned where 2 said pinning steadies it.
#  call2: which part of the CUPTI window costs the launch-bound job (validation/cupti_attach.py); `ab` of the launch
#         example's --cuda-graphs and of the moe example's --compile with more rounds.
#  x2comm (not run yet; the two-GPU kind): issue 10's last example, the communication overlap fix.
#  residue (not run yet): validation/cupti_residue.py, the next measurement of docs/validation.md 6e.
#  call4: the shipped window (synchronization records off by default since call3) paired on the MLP and transformer;
#         one `gpucheckup run --light` of the launch-bound job end to end.
#  call3: the window's activity kinds paired (light_paired.py --modes plain,cupti,nosync,kern) on the MLP; the moe
#         example captured compiled and not, with shapes.
set -u
PART=${1:-call1}
W=/tmp/s5; mkdir -p "$W"
. validation/device_site.sh  # the carried wheels, installed; PYTHONPATH and PATH set
GC="python3 -m gpucheckup"
EX="python3 -m gpucheckup.examples"
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
PIN="taskset -c 4-7"
pin_choice() {  # "taskset -c 4-7" when the pinned side's spread between rounds was under half the unpinned one's
  python3 - "$OUT/pin-ab.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print("taskset -c 4-7" if d["b"]["spread_pct"] < 0.5 * d["a"]["spread_pct"] else "")
except Exception:
    print("")
PY
}
if [ "$PART" = call1 ]; then
  echo "== 1. light window cost, paired in one process"
  PYTHONPATH=/tmp/cupti_site:$PYTHONPATH timeout 250 python3 validation/light_paired.py "$OUT/light_paired.json" \
    --jobs mlp,tf --seconds-per-job 100 2>&1 | grep -v "USDT\|Warn\|warn" | tail -14
  date -u
  echo "== 2. pinning: the launch example against itself, unpinned (A) and pinned (B)"
  timeout 110 $GC ab --rounds 4 --warmup 20 --measure 100 --json "$OUT/pin-ab.json" -- \
    $EX.launch --steps 120 -- $PIN $EX.launch --steps 120 2>&1 | tail -4
  P=$(pin_choice); echo "pin for part 3: '${P}'"; date -u
  echo "== 3. launch --compile, many rounds"
  timeout 250 $GC ab --rounds 8 --warmup 20 --measure 100 --json "$OUT/compile-ab.json" -- \
    $P $EX.launch --steps 120 -- $P $EX.launch --steps 120 --compile 2>&1 | tail -4
elif [ "$PART" = x2comm ]; then  # the two-GPU kind (run's kind nvidia-h200-x2), NVLink multicast off
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  echo "== the communication example on 2 GPUs: baseline checked up, --ddp (overlap) predicted and measured with ab"
  timeout 560 python3 validation/whatif_h200.py "$OUT/comm" --only comm --gpus 2 --rounds 5 2>&1 | tail -20
elif [ "$PART" = residue ]; then
  echo "== does the window leave a cost behind after cupti.finalize()? fresh processes, pristine first"
  PYTHONPATH=/tmp/cupti_site:$PYTHONPATH timeout 280 python3 validation/cupti_residue.py "$OUT/residue.json" \
    --processes 16 --deadline-s 250 2>&1 | grep -v "USDT\|Warn\|warn" | tail -30
elif [ "$PART" = call4 ]; then
  echo "== 1. the shipped light window (no synchronization records by default), paired in one process"
  PYTHONPATH=/tmp/cupti_site:$PYTHONPATH timeout 200 python3 validation/light_paired.py "$OUT/light_shipped.json" \
    --jobs mlp,tf --modes plain,cupti,both --seconds-per-job 85 2>&1 | grep -v "USDT\|Warn\|warn" | tail -12
  date -u
  echo "== 2. gpucheckup run --light on the launch-bound job, end to end"
  timeout 75 python3 validation/light_ab.py "$OUT/ab" --rounds 1 --deadline-s 45 --check-budget-s 25 --jobs launch \
    --modes cupti --cupti-site /tmp/cupti_site --work "$W/light" 2>&1 | tail -6
elif [ "$PART" = call3 ]; then
  echo "== 1. the window's activity kinds, paired in one process: all, without synchronizations, kernels only"
  PYTHONPATH=/tmp/cupti_site:$PYTHONPATH timeout 170 python3 validation/light_paired.py "$OUT/light_kinds.json" \
    --jobs mlp --modes plain,cupti,nosync,kern --seconds-per-job 140 2>&1 | grep -v "USDT\|Warn\|warn" | tail -6
  date -u
  echo "== 2. the moe example compiled, captured with shapes (what compile changes there, from its own trace)"
  timeout 120 $GC run --out "$W/runs/moe_compile" --record-shapes --skip 20 --steps 5 --no-report -- \
    $EX.moe --steps 45 --compile 2>&1 | grep -v "USDT\|Warn\|warn" | tail -2
  timeout 60 $GC run --out "$W/runs/moe" --record-shapes --skip 20 --steps 5 --no-report -- \
    $EX.moe --steps 45 2>&1 | grep -v "USDT\|Warn\|warn" | tail -2
else
  P=${PIN_CHOICE:-}
  echo "== 1. which part of the CUPTI window costs the launch-bound MLP (validation/cupti_attach.py)"
  PYTHONPATH=/tmp/cupti_site:$PYTHONPATH timeout 150 python3 validation/cupti_attach.py "$OUT/cupti_attach.json" \
    2>&1 | grep -v "USDT\|Warn\|warn" | cut -c1-900
  date -u
  echo "== 2. launch --cuda-graphs, many rounds"
  timeout 220 $GC ab --rounds 6 --warmup 20 --measure 100 --json "$OUT/graphs-ab.json" -- \
    $P $EX.launch --steps 120 -- $P $EX.launch --steps 120 --cuda-graphs 2>&1 | tail -2
  date -u
  echo "== 3. moe --compile, more rounds"
  timeout 190 $GC ab --rounds 4 --warmup 10 --measure 50 --json "$OUT/moe-compile-ab.json" -- \
    $P $EX.moe --steps 60 -- $P $EX.moe --steps 60 --compile 2>&1 | tail -2
fi
tar czf "$OUT/runs.tgz" -C "$W" . 2>/dev/null; date -u
