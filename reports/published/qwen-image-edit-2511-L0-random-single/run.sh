# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root (the script removes other bundles first: the
# 57.7 GB bundle needs the disk; the row's engine, regional-compile-fused, is the default):
LIMIT=500 bash scripts/gpu-runs/qualify.sh Qwen qwen
# The uploads' decode alone, on the same machine (decode.txt):
python3 scripts/gpu-runs/decode.py --torch $(find /tmp/rep-Qwen-row-engine-row-layout-c1 -path '*references*' -name '*.png' | sort)
# engines.txt: a non-row engine held to eager at load, and a -graphs engine refused:
ENGINES=regional-compile bash scripts/gpu-runs/engines.sh Qwen/Qwen-Image-Edit-2511 qwenimage 1
ENGINES=regional-compile-graphs bash scripts/gpu-runs/engines.sh Qwen/Qwen-Image-Edit-2511 qwenimage 1
