#!/bin/bash
# The encoder benchmark on the device, every preset and thread count measured side by side:
#   bash scripts/gpu-runs/encode-bench.sh [short]
# "short" keeps to Wan2.1's 17x832x480; without it Wan2.2's 121x1280x704 and MiniMax-H3's 124x1344x768 run too.
source .gpu/setup.sh || exit 1
cd server/encode || exit 1
short=; [ "$1" = short ] && short=-test.short
ENCODE_PRESETS=${ENCODE_PRESETS:-ultrafast,superfast,veryfast,medium} ENCODE_THREADS=${ENCODE_THREADS:-4,8,16} \
  /tmp/bin/encode.test -test.run '^$' -test.bench MP4 -test.benchtime 2x $short 2>&1 | tee "$OUT/encode-bench.txt"
