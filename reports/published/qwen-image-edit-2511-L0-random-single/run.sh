# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root (the script removes other bundles first: the
# 57.7 GB bundle needs the disk; the row's engine, regional-compile-fused, is the default). This
# run went detached (docs/DEVICE-KIT.md section 6), the same script under scripts/gpu-runs/detached.sh:
LIMIT=500 bash scripts/gpu-runs/qualify.sh Qwen qwenimage
# The uploads' decode, Pillow alone against the worker's, on the same machine (decode.txt; after
# a detached run the report is under /tmp/detached/report):
source .gpu/setup.sh
python3 scripts/gpu-runs/decode.py --torch --reps 5 $(find /tmp/rep-Qwen-row-engine-row-layout-c1 /tmp/detached/report -path '*references*' -name '*.png' 2>/dev/null | sort)
# inductor.tgz: after the run, the inductor cache's autotune records and the kernels that state its config:
(cd /tmp && tar czf "$OUT/inductor.tgz" $(find torchinductor_root -name '*.best_config'; grep -rl "'deterministic'" --include='*.py' torchinductor_root))
# engines.txt (earlier leases): a non-row engine held to eager at load, and a -graphs engine refused:
ENGINES=regional-compile bash scripts/gpu-runs/engines.sh Qwen/Qwen-Image-Edit-2511 qwenimage 1
ENGINES=regional-compile-graphs bash scripts/gpu-runs/engines.sh Qwen/Qwen-Image-Edit-2511 qwenimage 1
