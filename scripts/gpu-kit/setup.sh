# Sourced at the start of every device call (`source .gpu/setup.sh`): installs the kit that
# `make gpu-kit` built (docs/DEVICE-KIT.md). Copied to .gpu/ from scripts/gpu-kit/.
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# NVLink multicast stays off on the shared multi-GPU hosts (NCCL, PyTorch, NVSHMEM).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
# diffusers and AIPerf with only what the device lacks (scripts/gpu-kit/wheels.txt), installed
# for Python 3.12 by make gpu-kit as `pip install --no-deps --target` would; the device's own
# torch, transformers, numpy etc. serve the rest.
mkdir -p /tmp/site && tar xJf .gpu/site.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site
# Static ffmpeg and ffprobe, mediaserve and the gpu-tagged suite binary.
mkdir -p /tmp/bin
tar xJf .gpu/ff.tar.xz -C /tmp/bin || exit 1
tar xJf .gpu/bin.tar.xz -C /tmp/bin || exit 1
export PATH=/tmp/bin:$PATH
# A stand-in AIPerf venv: its python is the system interpreter, its aiperf runs aiperf.cli.
mkdir -p /tmp/av/bin
ln -sf "$(command -v python3)" /tmp/av/bin/python
printf '#!/bin/sh\nexec python3 -c "from aiperf.cli import app; app()" "$@"\n' >/tmp/av/bin/aiperf
chmod +x /tmp/av/bin/aiperf
export MEDIAQUAL_AIPERF_VENV=/tmp/av MEDIAQUAL_MEDIASERVE=/tmp/bin/mediaserve MEDIAQUAL_ROOT=$PWD
python3 -c 'import sys, importlib.metadata as m, torch, diffusers
print("kit: python", sys.version.split()[0], "torch", torch.__version__, "diffusers",
      diffusers.__version__, "aiperf", m.version("aiperf"), end="; ")' >&2 || echo "kit: the versions line above failed" >&2
ffmpeg -version | head -1 >&2
