#!/bin/bash
# `gpucheckup try` on the H200 (issue: configuration fixes applied by the agent, measured against the prediction),
# run from the folder that holds src/ and validation/, with the wheels carried (validation/device_site.sh). Each
# `try` is cross-checked by a hand-edited `gpucheckup ab` of the same fix where the job has a flag for it.
# PART picks what runs (each part fits a 10-minute call on one GPU):
#  call1: the launch-bound loop (no FIX: the check-up proposes), fused_optimizer against `ab ... --fused 1`;
#         the input-bound loop: dataloader_workers, pin_memory, persistent_workers, and `run --try`.
#  call2: the frameworks: HF Trainer (fused_optimizer, tf32), Lightning (fused_optimizer, dataloader_workers),
#         timm + AMP (cudnn_benchmark, expandable_segments).
#  call3 (2 GPUs): a torchrun DDP loop: fused_optimizer and an environment-only NCCL setting.
# Writes under $OUT: one JSON per trial (try_*.json, ab_*.json) and the console.
set -u
PART=${1:-call1}
OUT="${OUT:-$PWD/out}"; mkdir -p "$OUT"
. validation/device_site.sh
W=/tmp/try; mkdir -p "$W"
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
g() { timeout "$1" python3 -m gpucheckup "${@:2}" 2>&1 | grep -v "USDT" | cut -c1-400 | tail -40; date -u; }
if [ "$PART" = call1 ]; then
  g 280 try --rounds 2 --max-steps 120 --out "$W" --json "$OUT/try_launch.json" -- \
    python3 validation/train_launch_bound.py --steps 200
  g 120 ab --rounds 2 --warmup 30 --measure 90 --json "$OUT/ab_launch_fused.json" -- \
    python3 validation/train_launch_bound.py --steps 200 -- python3 validation/train_launch_bound.py --steps 200 --fused 1
  g 280 try dataloader_workers,pin_memory,dataloader_workers+pin_memory+persistent_workers --rounds 2 \
    --max-steps 40 --out "$W" --json "$OUT/try_input.json" -- python3 validation/train_input_bound.py --steps 60
elif [ "$PART" = call2 ]; then
  g 200 try fused_optimizer,tf32 --rounds 2 --max-steps 80 --out "$W" --json "$OUT/try_hf.json" -- \
    python3 validation/train_hf_trainer.py --steps 200
  g 200 try fused_optimizer,dataloader_workers=4 --rounds 2 --max-steps 120 --out "$W" --json "$OUT/try_lightning.json" \
    -- python3 validation/train_lightning.py --steps 300
  g 180 try cudnn_benchmark,expandable_segments --rounds 2 --max-steps 120 --out "$W" --json "$OUT/try_timm.json" -- \
    python3 validation/train_timm_amp.py --steps 300
elif [ "$PART" = call3 ]; then
  g 400 try fused_optimizer,env:NCCL_ALGO=Ring --rounds 2 --max-steps 60 --out "$W" --json "$OUT/try_ddp.json" -- \
    torchrun --nproc_per_node 2 tests/jobs/ddp_train.py --steps 200 --width 2048 --batch 256
fi
tar czf "$OUT/try_runs.tar.gz" -C "$W" . 2>/dev/null
