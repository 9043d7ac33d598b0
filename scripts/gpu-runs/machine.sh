#!/bin/bash
# What of the machine can change a run's bytes or times, one line each: the GPU (name, power
# limit, driver, max SM clock), the CPU and whether it has AVX-512, and the CPU kernels torch
# picks for it (torch dispatches CPU ops by capability, so two hosts can round differently).
#   bash scripts/gpu-runs/machine.sh     # after sourcing .gpu/setup.sh
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores, avx512f: $(grep -q -m1 -w avx512f /proc/cpuinfo && echo yes || echo no)"
python3 -c 'import torch; print("torch %s, CPU capability %s" % (torch.__version__, torch.backends.cpu.get_cpu_capability()))' 2>/dev/null || echo "no torch"
