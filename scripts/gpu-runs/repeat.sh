#!/bin/bash
# N native Tasks of the same prompt with one load, to see how much the Task varies between
# identical calls (docs/PERFORMANCE.md, "Repeatability of the Task"):
#   bash scripts/gpu-runs/repeat.sh ROW_ID BUILDER N      e.g. Wan-AI/Wan2.1-T2V-1.3B wan 8 (bundle.sh's builders)
# Prints each job's Task wall, phases, hand-over, encode, streamed frames and raw-frame digest.
id=$1 builder=$2 n=${3:-8}
source .gpu/setup.sh || exit 1
export MEDIAQUAL_BUNDLES=/tmp/bundles CUDA_VISIBLE_DEVICES=0
source scripts/gpu-runs/bundle.sh
l0_bundle "$builder" >/dev/null || exit 1
p=$(python3 -c 'import json; print(json.dumps(json.loads(open("fixtures/prompts/t2v.jsonl").readline())["text"]))')
: >/tmp/repeat.jsonl
for i in $(seq "$n"); do echo "{\"out\": \"/tmp/repeat/$i\", \"fields\": {\"prompt\": $p}}" >>/tmp/repeat.jsonl; done
timeout 500 /tmp/bin/mediaserve task -model "$id" -batch /tmp/repeat.jsonl >/dev/null 2>"$OUT/repeat.log" || { tail -20 "$OUT/repeat.log"; exit 1; }
for i in $(seq "$n"); do
  python3 -c "import json; a = json.load(open('/tmp/repeat/$i/actual.json'))
print($i, a['task_call_wall_ms'], a.get('task_phases_ms'), a['handover_ms'], a['encode_ms'], a['streamed_frames'], a['product']['frames_sha256'][:12])"
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
