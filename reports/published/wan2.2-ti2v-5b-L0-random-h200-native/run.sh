# Wan2.2-TI2V-5B L0: build the bundle, one native clip at the pinned settings, host facts.
source .gpu/setup.sh
set -x
df -h / /tmp /dev/shm; free -g; nproc
python3 -c "import torch,diffusers,transformers;print(torch.__version__,diffusers.__version__,transformers.__version__)"
dd if=/dev/zero of=/tmp/ddtest bs=1M count=4096 oflag=direct 2>&1 | tail -1; rm -f /tmp/ddtest
head -c 4000000000 /dev/zero | (time sha256sum) 2>&1 | tail -4
time python3 models/wan/build_l0.py --out /tmp/bundles --wan22 2>&1 | tail -15
du -sh /tmp/bundles/*/*
export MEDIAQUAL_BUNDLES=/tmp/bundles CUDA_VISIBLE_DEVICES=0
printf '{"out":"/tmp/w22/p0","fields":{"prompt":"A red ball bounces across a wooden floor in warm afternoon light"}}\n' >/tmp/batch.jsonl
( while sleep 20; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; done ) &
time mediaserve task -model Wan-AI/Wan2.2-TI2V-5B -batch /tmp/batch.jsonl 2>&1 | grep -v '"progress"' | tail -30
kill %1
cat /tmp/w22/p0/actual.json; cp /tmp/w22/p0/actual.json "$OUT/"
ls -la /tmp/w22/p0; ffprobe -v error -count_frames -show_entries stream=width,height,r_frame_rate,nb_read_frames,codec_name,pix_fmt -of json /tmp/w22/p0/artifact.mp4
[ "$(stat -c %s /tmp/w22/p0/artifact.mp4)" -lt 16000000 ] && cp /tmp/w22/p0/artifact.mp4 "$OUT/wan22-p0.mp4"
true
