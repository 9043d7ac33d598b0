#!/bin/bash
# One MiniMax-H3 native Task on one H200, with RANDOM weights at the real sizes, drawn in memory:
#   bash scripts/gpu-runs/minimax-native.sh
# The bundle is configs only (models/minimax/build_l0.py, a few kB on disk); models/minimax/adapter.py
# builds the 33 B transformer and the Qwen3-VL-32B text encoder from them at load and draws their
# weights on the GPU, so nothing of the ~134 GiB checkpoint touches the 64 GB disk. The Task runs at
# the row's pinned settings (models/minimax/minimax.go: 1344x768, 124 frames, 24 fps, 50 steps,
# guidance 1, seed 0) unless STEPS=N asks for fewer steps (a shakedown; actual.json says which).
# Environment: STEPS, LIMIT (seconds for the Task, default 540: a device command ends at 600),
# MEDIAQUAL_ENGINE. What it writes goes to $OUT (the device tool's output folder).
source .gpu/setup.sh || exit 1
export MEDIAQUAL_BUNDLES=/tmp/bundles CUDA_VISIBLE_DEVICES=0
id=MiniMaxAI/MiniMax-H3
# The device's 64 GB disk holds one big bundle at a time; this one is a few kB, the others go.
rm -rf /tmp/bundles/Qwen /tmp/bundles/Wan-AI "/tmp/bundles/$id"
time python3 models/minimax/build_l0.py --out /tmp/bundles 2>&1 | tail -6 | tee "$OUT/build.log"
cp "/tmp/bundles/$id/L0-RANDOM.txt" "$OUT/" 2>/dev/null
prompt=$(python3 -c 'import json; print(json.loads(open("fixtures/prompts/t2v.jsonl").readline())["text"])')
sets=(-set "prompt=$prompt")
[ -n "${STEPS:-}" ] && sets+=(-set "num_inference_steps=$STEPS")
# GPU memory and utilisation, and host memory (the text encoder's 62 GiB live there between
# encodings), every 10 s.
( while sleep 10; do
    echo "$(date +%T) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) host $(free -g | awk '/^Mem:/ {print $3 " GiB used"}')"
  done ) >"$OUT/smi-minimax.log" &
sampler=$!
rm -rf /tmp/native
# The load (imports, drawing ~69 B parameters, the text encoder's copy to host memory) is not
# bounded by the bundle's size here, so the load timeout is given, not derived from a few kB.
time timeout "${LIMIT:-540}" /tmp/bin/mediaserve task -model "$id" "${sets[@]}" -out /tmp/native -raw \
  -load-timeout 15m -engine "${MEDIAQUAL_ENGINE:-}" 2>"$OUT/native.log"
rc=$?
echo "mediaserve task rc=$rc"
[ $rc -eq 0 ] || tail -40 "$OUT/native.log"
kill "$sampler"
grep -h "loading \|in-memory L0 weights\|loaded in\|warm-up" "$OUT/native.log"
[ -f /tmp/native/actual.json ] || exit 1
cp /tmp/native/actual.json "$OUT/actual.json"
ffprobe -v error -count_frames -show_entries stream=codec_name,pix_fmt,width,height,r_frame_rate,nb_read_frames,duration \
  -of json /tmp/native/artifact.mp4 >"$OUT/ffprobe.json"
cat "$OUT/actual.json" "$OUT/ffprobe.json"
# Encode quality: PSNR of the decoded clip against the raw frames (ffmpeg's psnr filter, RGB).
size=$(python3 -c 'import json; a=json.load(open("/tmp/native/actual.json"))["product"]["actual"]; print("%dx%d" % (a["width"], a["height"]))')
ffmpeg -hide_banner -nostdin -f rawvideo -pix_fmt rgb24 -s "$size" -i /tmp/native/frames.rgb -i /tmp/native/artifact.mp4 \
  -lavfi "[1:v]format=rgb24[b];[0:v][b]psnr" -f null - 2>&1 | grep -o "PSNR.*" | tee "$OUT/psnr.txt"
