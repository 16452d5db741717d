#!/bin/bash
# One GPU-machine call (issue 23): what torch.compile costs a framework loop's host, read from the loop run compiled.
# Captures the corpus's Lightning job eager and with --compile default one after the other on one machine
# (`gpucheckup run`, the corpus's window), so the compiled trace's wrappers and generated launches can be set against
# the torch_compile edit's model of the eager trace (validation/compile_cost.py, off the GPU); then measures the fix
# again with `ab` (ROUNDS interleaved rounds) and, as time allows, HF Trainer's torch_compile (not measured before).
# Run from the repository's root with the wheels in WHEELS (validation/device_site.sh).
#   WHEELS=.dev24 ROUNDS=5 DEADLINE_S=420 bash validation/h200_compile_cost.sh call1
set -u
TAG=${1:-call1}
. validation/device_site.sh  # the carried wheels, installed; PYTHONPATH and PATH set
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import torch, lightning, transformers; print('torch', torch.__version__, 'lightning', lightning.__version__, \
'transformers', transformers.__version__)" 2>&1 | tail -1
W=/tmp/compile_$TAG
T0=$(date +%s); mkdir -p "$W"
for mode in eager default; do
  flags=(); [ "$mode" != eager ] && flags=(--compile "$mode")
  timeout 150 python3 -m gpucheckup run --out "$W/runs" --name "lightning_$mode" --skip 80 --steps 10 --no-report -- \
    python3 validation/train_lightning.py --steps 200 "${flags[@]}" 2>&1 | grep -v "USDT\|Warn\|warn" | tail -3
  echo "lightning $mode captured at +$(( $(date +%s) - T0 )) s"
done
python3 validation/framework_corpus.py measure "$W" --pairs ${PAIRS:-lightning:torch_compile,hf:torch_compile} \
  --rounds "${ROUNDS:-5}" --deadline-s "${DEADLINE_S:-420}" --measured tests/data/h200/corpus/measured.json 2>&1 \
  | grep -v "USDT\|Warn\|warn\|━\|─\|┃\|│\|round [0-9] done" | cut -c1-400
date -u
(cd /tmp && tar czf "$OUT/compile_$TAG.tgz" --exclude='*.pyc' "compile_$TAG"); ls -la "$OUT"
