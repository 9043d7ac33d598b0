# Wan2.1-T2V-1.3B L0: build the bundle, then the gpu-tagged qualification.
source .gpu/setup.sh
set -x
time python3 models/wan/build_l0.py --out /tmp/bundles 2>&1 | tail -12
export MEDIAQUAL_BUNDLES=/tmp/bundles MEDIAQUAL_GPUS=0 MEDIAQUAL_REPORT_DIR=/tmp/rep
( while sleep 30; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; done ) >"$OUT/smi.log" &
time timeout 480 /tmp/bin/qual.test -test.run 'Wan2.1' -test.v=test2json -test.count=1 -test.timeout 9m >"$OUT/test2json.out" 2>&1
echo "qual.test rc=$?"
kill %1
cd /tmp/rep && du -sh . && cp results.json results.md index.html "$OUT/"
find . -name ledger.jsonl -exec cp {} "$OUT/ledger.jsonl" \;
tar czf "$OUT/cases.tgz" --exclude='*.mp4' --exclude='*.png' --exclude='*.rgb' --exclude='profile_export_raw.jsonl' --exclude='inputs.json' --exclude='raw_records' cases
mkdir -p "$OUT/pictures" && find . -path '*pictures*' -name '*.png' -exec cp {} "$OUT/pictures/" \;
ls -la "$OUT" "$OUT/pictures"
true
