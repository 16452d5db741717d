#!/bin/bash
# One GPU-machine call (docs/validation.md 6p): the MoE job (validation/train_moe.py, a host read per layer in its
# forward) eager against torch.compile, default and reduce-overhead, with `gpucheckup ab`: what the check-up's bounds
# and its upper-bound replays (the forward's reads replayed gone) are measured against.
#   WHEELS=.dev24 bash validation/h200_moe_compile.sh
set -u
. validation/device_site.sh
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gc() { python3 -m gpucheckup "$@" 2>&1 | grep -v "USDT\|━\|─" | cut -c1-300 | tail -12; }
job=(python3 validation/train_moe.py --steps ${STEPS:-70})
for mode in ${MODES:-default reduce-overhead}; do
  echo "== $mode $(date -u +%T)"
  gc ab --rounds ${ROUNDS:-2} --warmup ${WARMUP:-25} --measure ${MEASURE:-40} --json "$OUT/ab_moe_$mode.json" \
    -- "${job[@]}" -- "${job[@]}" --compile "$mode"
done
