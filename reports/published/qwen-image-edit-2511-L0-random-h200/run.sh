# Qwen-Image-Edit-2511 L0: build the bundle, then the gpu-tagged qualification.
source .gpu/setup.sh
set -x
python3 -c "import torchvision; print('torchvision', torchvision.__version__)"
time python3 models/qwenimage/build_l0.py --out /tmp/bundles 2>&1 | tail -12
df -h /
export MEDIAQUAL_BUNDLES=/tmp/bundles MEDIAQUAL_GPUS=0 MEDIAQUAL_REPORT_DIR=/tmp/rep
( while sleep 30; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; done ) >"$OUT/smi.log" &
time timeout 465 /tmp/bin/qual.test -test.run 'Qwen' -test.v=test2json -test.count=1 -test.timeout 9m >"$OUT/test2json.out" 2>&1
echo "qual.test rc=$?"
kill %1
cd /tmp/rep && ls -R | head -60 && du -sh .
cp results.json results.md "$OUT/" ; [ -f index.html ] && cp index.html "$OUT/"
find . -name ledger.jsonl -exec cp {} "$OUT/ledger.jsonl" \;
tar czf "$OUT/cases.tgz" --exclude='*.png' --exclude='*.rgb' --exclude='profile_export_raw.jsonl' --exclude='inputs.json' --exclude='raw_records' cases
ls -la "$OUT"
true
