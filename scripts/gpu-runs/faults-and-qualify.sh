#!/bin/bash
# A row's wrong runtimes (parity-faults.sh), then its qualification (qualify.sh), on one GPU; as
# published for issue #40's rows, detached (detached.sh):
#   QUALIFY=scripts/gpu-runs/faults-and-qualify.sh bash scripts/gpu-runs/detached.sh start ROW BUILDER
bash scripts/gpu-runs/parity-faults.sh "$2"
bash scripts/gpu-runs/qualify.sh "$1" "$2"
