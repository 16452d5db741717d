#!/bin/bash
# `gpucheckup try` against a hand-edited `gpucheckup ab` of the same fix, in the same call (one machine), for the
# trials whose intervals did not overlap the earlier session's ab (docs/validation.md 7f): each pair is the ab
# (the job's own flag) then the try (the agent's patch), the same rounds, warm-up and measured steps as the corpus.
# Run from the repository's root with the wheels carried in WHEELS (default .dev24); DEADLINE_S: no new pair after it.
set -u
WHEELS=${WHEELS:-.dev24}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
T0=$(date +%s); date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
W=/tmp/tva; mkdir -p "$W"
gc() { python3 -m gpucheckup "$@" 2>&1 | grep -v "USDT\|runs your command again\|No --max-steps\|━\|─" | cut -c1-300 | tail -8; }
pair() {  # NAME ROUNDS WARMUP MEASURE FLAG TRIAL SCRIPT STEPS [BASE FLAGS]
  if [ $(( $(date +%s) - T0 )) -gt "${DEADLINE_S:-520}" ]; then echo "$1: skipped (deadline)"; return; fi
  local base=(python3 validation/$7 --steps $8 ${9:-})
  echo "== $1 ab ($5) $(( $(date +%s) - T0 )) s"
  gc ab --rounds $2 --warmup $3 --measure $4 --json "$OUT/ab_$1.json" -- "${base[@]}" -- "${base[@]}" $5
  echo "== $1 try ($6) $(( $(date +%s) - T0 )) s"
  gc try "$6" --no-predict --rounds $2 --warmup $3 --measure $4 --out "$W" --json "$OUT/try_$1.json" -- "${base[@]}"
}
# PAIRS="input_pin lightning_tf32 forloop_tf32": the configuration fixes the corpus's check-ups propose that no
# try had measured yet (docs/validation.md 7f)
for p in ${PAIRS:-lightning_workers timm_fused input_workers}; do
  case $p in
    lightning_workers) pair $p 3 40 120 "--workers 1" dataloader_workers=1 train_lightning.py 200 ;;
    timm_fused) pair $p 3 40 120 "--fused 1" fused_optimizer train_timm_amp.py 200 ;;
    input_workers) pair $p 2 8 24 "--workers 19" dataloader_workers=19 train_input_bound.py 40 ;;
    input_pin) pair $p 2 8 24 "--pin 1" pin_memory train_input_bound.py 40 ;;
    lightning_tf32) pair $p 3 40 120 "--tf32 1" tf32 train_lightning.py 200 ;;
    forloop_tf32) pair $p 3 30 120 "--tf32 1" tf32 train_launch_bound.py 200 "--foreach 0" ;;
  esac
done
date -u
