#!/usr/bin/env bash
# The two-GPU validation of the many-rank check-up (issue 9), in one device call (about 5 minutes):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site whl/*.whl   # msgspec
#   export PYTHONPATH=/tmp/site:$PWD/src; OUT=... bash validation/h200x2_ranks.sh
# Captures with `gpucheckup run -- torchrun --nproc_per_node 2 tests/jobs/ddp_train.py` (bar 1-GPU):
#   ddp_healthy (and ddp_healthy_noshapes, without --record-shapes), ddp_sockets (NCCL_P2P_DISABLE=1
#   NCCL_SHM_DISABLE=1: NCCL on sockets), ddp_slow_input (rank 1's DataLoader sleeps 40 ms a batch),
#   fsdp (FSDP2 fully_shard), ddp_1gpu (the same job on one GPU, for `gpucheckup scaling`);
# then `gpucheckup commbench` on NVLink and on sockets. The runs are analysed off the machine.
# ddp_slow_host (rank 1 spins 30 ms in Python a step), ddp_slow_compute (rank 1's batch 3x larger).
# ONLY="ddp_slow_host ..." runs only the named captures; NO_EXTRA=1 leaves out ddp_healthy_noshapes, NO_COMMBENCH=1 the commbench runs.
# Writes under $OUT: runs.tar.gz, commbench.json, commbench-sockets.json, console.txt, env.txt.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="${PYTHONPATH:-/tmp/site:$PWD/src}"
RUNS=/tmp/ranks-runs
rm -rf "$RUNS"; mkdir -p "$RUNS"
GC="python3 -m gpucheckup.cli"
TR="python3 -m torch.distributed.run --standalone"
JOB="tests/jobs/ddp_train.py ${JOB_ARGS:---width 4096 --layers 8 --batch 1024}"
{
  nvidia-smi topo -m; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
  python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"
} > "$OUT/env.txt" 2>&1
cap() {  # name, extra gpucheckup options, then the command; ONLY="name ..." runs only those
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout 150 $GC run --out "$RUNS/$name" --no-report "$@" 2>&1 | grep -v "^USDT" | tail -8
  echo "=== $name: rc ${PIPESTATUS[0]}, $((SECONDS - t0)) s"
}
{
cap ddp_healthy --skip 10 --steps 5 --record-shapes -- $TR --nproc_per_node 2 $JOB --steps 25
[ -z "${NO_EXTRA:-}" ] && cap ddp_healthy_noshapes --skip 10 --steps 5 -- $TR --nproc_per_node 2 $JOB --steps 25
cap ddp_slow_input --skip 10 --steps 5 --record-shapes -- $TR --nproc_per_node 2 $JOB --steps 25 --slow-rank 1 --slow-ms 40
cap fsdp --skip 10 --steps 5 --record-shapes -- $TR --nproc_per_node 2 $JOB --steps 25 --fsdp
cap ddp_1gpu --skip 10 --steps 5 --record-shapes -- $TR --nproc_per_node 1 $JOB --steps 25
cap ddp_slow_host --skip 10 --steps 5 --record-shapes -- $TR --nproc_per_node 2 $JOB --steps 25 --slow-rank 1 --slow-ms 30 --slow-kind host
cap ddp_slow_compute --skip 10 --steps 5 --record-shapes -- $TR --nproc_per_node 2 $JOB --steps 25 --slow-rank 1 --slow-kind compute --slow-factor 3
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 cap ddp_sockets --skip 8 --steps 4 --record-shapes -- $TR --nproc_per_node 2 $JOB --steps 18
if [ -z "${NO_COMMBENCH:-}" ]; then
echo "=== commbench NVLink"
timeout 120 $GC commbench --nproc 2 ${CB_ARGS:-} --out "$OUT/commbench.json" 2>&1 | grep -v "^USDT" | tail -30
echo "=== commbench sockets"
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 120 $GC commbench --nproc 2 --max-mib 64 --out "$OUT/commbench-sockets.json" 2>&1 | grep -v "^USDT" | tail -20
fi
} 2>&1 | tee "$OUT/console.txt"
tar czf "$OUT/runs.tar.gz" -C "$RUNS" .
ls -la "$OUT"
