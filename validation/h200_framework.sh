#!/bin/bash
# H200 checks of the light window on framework loops (docs/validation.md 6f), run from the folder that holds src/,
# validation/ and the wheels (WHEELS: whl/ for msgspec and py-spy, whl_cupti/ for cupti-python, whl_cb/ for
# cuda-bindings 13; validation/device_site.sh). PART picks what runs:
#  call1: 1. the residue owed by 6e (validation/cupti_residue.py: fresh processes, pristine first);
#         2. whole runs, `gpucheckup run` on HF Trainer and Lightning: the CUPTI light window, the torch.profiler
#            light window (the fallback where cupti-python is missing) and the full window, one process each; on
#            timm+AMP and the GPU-bound transformer (batch 16) the CUPTI light window and the full window;
#         3. the light window's parts paired inside each framework's own loop (validation/paired_steps.py).
#  call2: the change measured: whole runs (CUPTI light, full) on HF Trainer, Lightning and timm+AMP (two rounds) and
#         the GPU-bound transformer at batch 16 (one); paired cycles in timm's loop and on the GPU-bound transformer.
set -u
PART=${1:-call1}
W=/tmp/fw; mkdir -p "$W"
. validation/device_site.sh  # the carried wheels, installed; PYTHONPATH and PATH set
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import transformers, lightning, timm; print('transformers', transformers.__version__, 'lightning', \
lightning.__version__, 'timm', timm.__version__)" 2>&1 | tail -1
CS=/tmp/cupti_site
quiet() { grep -v "USDT\|Warn\|warn"; }
paired() {  # JOB SCRIPT SECONDS MODES
  PAIRED_SECONDS=$3 PAIRED_MODES=$4 PYTHONPATH=$CS:$PYTHONPATH timeout $(( $3 + 60 )) python3 \
    validation/$2 --paired "$OUT/paired_$1.json" 2>&1 | quiet | tail -8
  date -u
}
if [ "$PART" = call1 ]; then
  echo "== 1. residue after cupti.finalize(): fresh processes"
  PYTHONPATH=$CS:$PYTHONPATH timeout 190 python3 validation/cupti_residue.py "$W/residue.json" \
    --processes 16 --deadline-s 150 2>&1 | quiet | tail -30
  cp "$W/residue.json" "$OUT/"; date -u
  echo "== 2. whole runs: cupti light, torch.profiler light, full"
  timeout 235 python3 validation/light_ab.py "$OUT/ab" --rounds 1 --deadline-s 220 --check-budget-s 0 --run-s 12 \
    --plan 'hf:cupti,light,full;lightning:cupti,light,full;timm:cupti,full;gpu16:cupti,full' --cupti-site $CS \
    --work "$W/light" 2>&1 | quiet | cut -c1-300 | tail -12
  date -u
  echo "== 3. paired in the framework's loop"
  paired hf train_hf_trainer.py 35 plain,ranges,cupti,spy,both
  paired lightning train_lightning.py 35 plain,ranges,cupti,spy,both
elif [ "$PART" = call2 ]; then
  echo "== 1. whole runs: the CUPTI light window and the full window, two rounds (one for the GPU-bound job)"
  timeout 300 python3 validation/light_ab.py "$OUT/ab" --rounds 2 --deadline-s 290 --check-budget-s 0 --run-s 15 \
    --plan "${PLAN:-hf:cupti,full;lightning:cupti,full;timm:cupti,full}" --cupti-site $CS \
    --work "$W/light" 2>&1 | quiet | cut -c1-300 | tail -9
  timeout 60 python3 validation/light_ab.py "$OUT/ab_gpu" --rounds 1 --deadline-s 55 --check-budget-s 0 --run-s 12 \
    --plan "gpu16:cupti,full" --cupti-site $CS --work "$W/light" 2>&1 | quiet | cut -c1-300 | tail -3
  date -u
  echo "== 2. paired in the loop: timm+AMP; the GPU-bound transformer (light_paired.py)"
  paired timm train_timm_amp.py 35 plain,cupti,both
  PYTHONPATH=$CS:$PYTHONPATH timeout 70 python3 validation/light_paired.py "$OUT/paired_tf.json" --jobs tf \
    --modes plain,cupti,both --seconds-per-job 45 2>&1 | quiet | tail -5
fi
rm -f "$OUT"/*.partial "$OUT"/ab*/light_ab.md
for j in hf lightning; do (cd "$W/light/runs" 2>/dev/null && tar czf "$OUT/runs_$j.tgz" $j-*); done
(cd "$W/light/runs" 2>/dev/null && tar czf "$OUT/runs_other.tgz" $(ls | grep -v '^hf-\|^lightning-')); ls -la "$OUT"; date -u
