#!/usr/bin/env python3
"""The wrong runtimes of models/pyworker/faults.py, each held to parity on one load of a family's
worker at the row's pinned shape: the worker loads as the row serves it but with engine eager
(its reference and fp32 floor measured by prepare), then each fault is put in, the served step
taken and figured against that reference, and the fault taken out. The fused kernels go in for
fused-scale and stay, so it runs last. Writes the list of {"fault", "refused", "why", ...figures}
as JSON and exits 1 unless every fault was refused.
  python3 scripts/gpu-runs/faults.py OUT.json wan|qwenimage ADAPTER-ARGS...
ADAPTER-ARGS as the family's worker takes them (models/<family>/adapter.py), e.g. for Wan2.1
--bundle-name Wan-AI/Wan2.1-T2V-1.3B-Diffusers --flow-shift 3.0 --warmup-size 832x480 --warmup-frames 17.
"""
import importlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))

from pyworker import faults, parity  # noqa: E402


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    out, family, args = argv[0], argv[1], argv[2:]
    adapter = importlib.import_module(family + ".adapter")
    cfg = adapter.parse_args(args + ["--engine", "eager"], os.environ)
    b = adapter.DiffusersBackend(cfg)  # loads, and prepare measures the reference and the floor
    reference, fp32 = b.parity_runs
    got = []
    for name in faults.FAULTS:
        undo = faults.inject(name, b, b.pipe, b.torch)
        try:
            fig = b.parity_served(b.pipe, reference, fp32, name)
        finally:
            undo()
        try:
            parity.verdict(fig, b.engine or "eager", cfg.layout)
            why = None
        except parity.ParityError as e:
            why = str(e)
        got.append(dict({"fault": name, "refused": why is not None, "why": why}, **fig))
        print("%s: %s" % (name, "refused" if why else "NOT refused"), flush=True)
    with open(out, "w") as f:
        json.dump(got, f, indent=1)
        f.write("\n")
    return 0 if all(g["refused"] for g in got) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
