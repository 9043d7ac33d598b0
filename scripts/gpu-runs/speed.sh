#!/bin/bash
# A family's runtime variants side by side in one device call (docs/PERFORMANCE.md, "Task speed"):
#   bash scripts/gpu-runs/speed.sh wan|qwenimage [N] [VARIANT...]
# Each variant runs in its own process (scripts/gpu-runs/speed.py): load, warm-up, N jobs of the
# family's pinned call, a JSON line a job, also kept in $OUT/speed.jsonl.
family=$1 n=${2:-3}; shift 2
variants=${*:-eager regional-compile regional-compile+cfg-batch regional-compile+autotune}
source .gpu/setup.sh || exit 1
export CUDA_VISIBLE_DEVICES=0
case $family in wan | qwenimage) ;; *) echo "family: wan or qwenimage"; exit 2 ;; esac
source scripts/gpu-runs/bundle.sh
bundle=$(l0_bundle "$family") || exit 1
bash scripts/gpu-runs/machine.sh  # machine to machine bytes
python3 -c 'import torch; print("sdpa priority:", torch._C._get_sdp_priority_order())' 2>&1 | tail -1
for v in $variants; do
  timeout 270 python3 scripts/gpu-runs/speed.py $family $bundle "$v" "$n" 2>"$OUT/speed-$family-${v//+/_}.log" \
    | tee -a "$OUT/speed.jsonl"; [ "${PIPESTATUS[0]}" = 0 ] || { echo "$v failed:"; tail -5 "$OUT/speed-$family-${v//+/_}.log"; }
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
