#!/bin/bash
# Engines side by side on the same bundle, same prompts, in one call:
#   ENGINES="eager regional-compile" bash scripts/gpu-runs/engines.sh ROW_ID BUNDLE_BUILDER N
# e.g. engines.sh Wan-AI/Wan2.1-T2V-1.3B wan 2, Qwen/Qwen-Image-Edit-2511 qwenimage 2, or
# STEPS=2 engines.sh Wan-AI/Wan2.2-TI2V-5B wan22 2 (the builders of bundle.sh)
# Runs `mediaserve task -batch` once an engine (N pinned inputs each; ENGINES defaults to eager
# and regional-compile), then prints each job's Task wall, its phases and its raw-frame digest,
# whether each engine repeats its own bytes, and each load's parity before ready (its figures
# against eager on this GPU, pyworker/parity.py): the cheap way to hold every engine to eager
# on the GPU, one load each, without a qualification. STEPS=N sets each job's
# num_inference_steps (default the row's): the shape, and so what a compiled engine runs
# compiled, stays the row's pinned one, so a long row (Wan2.2's 50 steps) fits a device call.
id=$1 builder=$2 n=${3:-3}
source .gpu/setup.sh || exit 1
export MEDIAQUAL_BUNDLES=/tmp/bundles CUDA_VISIBLE_DEVICES=0
bash scripts/gpu-runs/machine.sh
source scripts/gpu-runs/bundle.sh
l0_bundle "$builder" >/dev/null || exit 1
# A text-to-video row takes the t2v prompts; an edit row (BUNDLE_BUILDER qwenimage) the edit
# fixtures, each a photograph and an instruction.
case $builder in
  qwenimage) head -"$n" fixtures/edits/photos.jsonl ;;
  *) head -"$n" fixtures/prompts/t2v.jsonl ;;
esac >/tmp/prompts.jsonl
engines=${ENGINES:-eager regional-compile}
for engine in $engines; do
  # The first input twice: an engine must repeat its own bytes.
  python3 - "$engine" "$PWD" "${STEPS:-}" >/tmp/batch-$engine.jsonl <<'PY'
import json, sys
engine, root, steps = sys.argv[1], sys.argv[2], sys.argv[3]
for i, line in enumerate(open("/tmp/prompts.jsonl")):
    item = json.loads(line)
    for rep in ("a", "b") if i == 0 else ("a",):
        job = {"out": "/tmp/eng/%s/%d%s" % (engine, i, rep), "fields": {"prompt": item.get("text") or item["instruction"]}}
        if steps:
            job["fields"]["num_inference_steps"] = steps
        if "image" in item:
            job["reference"] = "%s/fixtures/images/%s" % (root, item["image"])
        print(json.dumps(job))
PY
  start=$(date +%s.%N)
  /tmp/bin/mediaserve task -model "$id" -batch /tmp/batch-$engine.jsonl -engine $engine >/dev/null 2>/tmp/eng-$engine.log || { tail -20 /tmp/eng-$engine.log; exit 1; }
  echo "$engine: load + jobs $(python3 -c "import time; print(round(time.time() - $start, 1))") s"
done
ENGINES="$engines" python3 - <<'PY'
import glob, json, os
for engine in os.environ["ENGINES"].split():
    rows = []
    for d in sorted(glob.glob("/tmp/eng/%s/*" % engine)):
        a = json.load(open(os.path.join(d, "actual.json")))
        rows.append((os.path.basename(d), a["task_call_wall_ms"], a.get("task_phases_ms"), a["handover_ms"], a["encode_ms"], a["product"]["frames_sha256"][:16]))
    for r in rows:
        print(engine, *r)
    same = rows[0][5] == rows[1][5]
    print(engine, "repeats its bytes (0a == 0b):", same)
    first = json.load(open(os.path.join(sorted(glob.glob("/tmp/eng/%s/*" % engine))[0], "actual.json")))
    print(engine, "parity:", json.dumps(first["product"]["actual"].get("parity")))
PY
grep -h "warm-up\|loaded in" /tmp/eng-*.log
