# Sourced at the start of every device call: installs the carried kit (docs/GPU.md).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/bin
tar xJf .gpu/ff.tar.xz -C /tmp/bin && mv /tmp/bin/ffmpeg-linux-x64 /tmp/bin/ffmpeg && mv /tmp/bin/ffprobe-linux-x64 /tmp/bin/ffprobe
tar xJf .gpu/bin.tar.xz -C /tmp/bin
export PATH=/tmp/bin:$PATH
mkdir -p /tmp/av/bin
ln -sf "$(command -v python3)" /tmp/av/bin/python
printf '#!/bin/sh\nexec python3 -c "from aiperf.cli import app; app()" "$@"\n' >/tmp/av/bin/aiperf
chmod +x /tmp/av/bin/aiperf
export MEDIAQUAL_AIPERF_VENV=/tmp/av MEDIAQUAL_MEDIASERVE=/tmp/bin/mediaserve MEDIAQUAL_ROOT=$PWD
