# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root (the row's engine, regional-compile, is the
# default; the L0 bundle is built by the run). On a host without a 10-minute command limit:
LIMIT=1440 bash scripts/gpu-runs/qualify.sh Wan2.2 wan22
# On the device here (10 minutes a command), the same run detached, followed until it ended:
#   LIMIT=1440 bash scripts/gpu-runs/detached.sh start Wan2.2 wan22
#   WAIT=540 bash scripts/gpu-runs/detached.sh status   # again, within 30 s, until it says ended
