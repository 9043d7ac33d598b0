# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an 80 GB H100 (`run` with kind nvidia-h100-x1), then from the repository root (the
# row's engine, regional-compile-fused-graphs, is the default). Detached (docs/DEVICE-KIT.md
# section 6): the row's wrong runtimes (parity-faults.json and .log, one load, engine eager),
# then its qualification.
LIMIT=260 QUALIFY=scripts/gpu-runs/faults-and-qualify.sh bash scripts/gpu-runs/detached.sh start Wan2.1 wan
WAIT=520 bash scripts/gpu-runs/detached.sh status
# parity-faults.json and .log alone (as republished at d29da9c, issue #47), from the repository root on
# the device: $OUT/parity-faults-wan.json and .log
#   bash scripts/gpu-runs/parity-faults.sh wan
