#!/bin/bash
# One gpu-tagged qualification on the device, from the kit `make gpu-kit` builds:
#   bash scripts/gpu-runs/qualify.sh ROW wan|wan22|qwenimage
# ROW is the -run pattern (Wan2.1, Qwen, ...), the second argument the L0 bundle's builder (bundle.sh).
# Environment: MEDIAQUAL_ENGINE, MEDIAQUAL_CONCURRENCY, MEDIAQUAL_GPUS (default 0) and
# MEDIAQUAL_LAYOUT (e.g. MEDIAQUAL_GPUS=0,1 MEDIAQUAL_LAYOUT=cfg-2 on nvidia-h200-x2) are passed to
# the suite; LIMIT (seconds, default 480), after which `timeout` stops the suite (which then writes
# its reports; go test's own -timeout, which would not, is 5 minutes later). It leaves one archive, run-<tag>.tgz, in $OUT (the device
# tool's output folder), so two runs fit one device call.
row=$1 builder=$2
source .gpu/setup.sh || exit 1
set -x
tag=$row-${MEDIAQUAL_ENGINE:-row-engine}-${MEDIAQUAL_LAYOUT:-row-layout}-c${MEDIAQUAL_CONCURRENCY:-1}
export MEDIAQUAL_BUNDLES=/tmp/bundles MEDIAQUAL_GPUS=${MEDIAQUAL_GPUS:-0} MEDIAQUAL_REPORT_DIR=${MEDIAQUAL_REPORT_DIR:-/tmp/rep-$tag}
source scripts/gpu-runs/bundle.sh
l0_bundle "$builder" >/dev/null || exit 1
bash scripts/gpu-runs/machine.sh | tee "$OUT/machine-$tag.txt"  # machine to machine bytes
( while sleep 20; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; done ) >"$OUT/smi-$tag.log" &
time timeout "${LIMIT:-480}" /tmp/bin/qual.test -test.run "$row" -test.v=test2json -test.count=1 -test.timeout $((${LIMIT:-480} + 300))s >"$OUT/test2json-$tag.out" 2>&1
echo "qual.test rc=$?"
kill %1
cd "$MEDIAQUAL_REPORT_DIR" || exit 1
# What comes back: one archive a run (the device returns at most 8 files a call, so two runs
# fit one call), with the reports, the ledger, logs and pictures; artifacts and raw frames stay
# there (the device returns files up to 16 MiB).
mv "$OUT/smi-$tag.log" "$OUT/test2json-$tag.out" "$OUT/machine-$tag.txt" .
tar cf /tmp/run.tar --exclude='*.mp4' --exclude='*.rgb' --exclude='*.png' --exclude='profile_export_raw.jsonl' \
  --exclude='inputs.json' --exclude='raw_records' .
find . -path '*pictures*' -name '*.png' -print0 | tar rf /tmp/run.tar --null -T -  # the report's pictures only
gzip -c /tmp/run.tar >"$OUT/run-$tag.tgz" && rm /tmp/run.tar
ls -la "$OUT/run-$tag.tgz"
grep -E "where the time went|task speed|encode quality|timing \(" results.md
true
