# Reproduce: `make gpu-kit`, carry the repository and .gpu/ to a host with two H200s, then from
# the repository root:
MEDIAQUAL_ENGINE=regional-compile MEDIAQUAL_GPUS=0,1 MEDIAQUAL_LAYOUT=cfg-2 bash scripts/gpu-runs/qualify.sh Wan2.1 wan
