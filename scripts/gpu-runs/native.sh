#!/bin/bash
# One native Task at a row's pinned settings, with the raw frames kept and ffprobe'd:
#   bash scripts/gpu-runs/native.sh ROW_ID BUILDER
# e.g. native.sh Wan-AI/Wan2.2-TI2V-5B wan22 (bundle.sh's builders)
id=$1 builder=$2
source .gpu/setup.sh || exit 1
export MEDIAQUAL_BUNDLES=/tmp/bundles CUDA_VISIBLE_DEVICES=0
source scripts/gpu-runs/bundle.sh
l0_bundle "$builder" >/dev/null || exit 1
prompt=$(python3 -c 'import json; print(json.loads(open("fixtures/prompts/t2v.jsonl").readline())["text"])')
( while sleep 10; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; done ) >"$OUT/smi-native.log" &
time /tmp/bin/mediaserve task -model "$id" -set "prompt=$prompt" -out /tmp/native -raw -engine "${MEDIAQUAL_ENGINE:-}" 2>"$OUT/native.log" || tail -30 "$OUT/native.log"
kill %1
cp /tmp/native/actual.json "$OUT/actual.json"
ffprobe -v error -count_frames -show_entries stream=codec_name,pix_fmt,width,height,r_frame_rate,nb_read_frames,duration -of json /tmp/native/artifact.mp4 >"$OUT/ffprobe.json"
cat "$OUT/actual.json" "$OUT/ffprobe.json"
grep -h "warm-up\|loaded in" "$OUT/native.log"
# Encode quality: PSNR of the decoded clip against the raw frames (ffmpeg's psnr filter, RGB).
size=$(python3 -c 'import json; a=json.load(open("/tmp/native/actual.json"))["product"]["actual"]; print("%dx%d" % (a["width"], a["height"]))')
ffmpeg -hide_banner -nostdin -f rawvideo -pix_fmt rgb24 -s "$size" -i /tmp/native/frames.rgb -i /tmp/native/artifact.mp4 \
  -lavfi "[1:v]format=rgb24[b];[0:v][b]psnr" -f null - 2>&1 | grep -o "PSNR.*" | tee "$OUT/psnr.txt"
