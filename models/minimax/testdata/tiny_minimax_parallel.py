#!/usr/bin/env python3
"""MiniMax-H3's ulysses-2 on two CPU ranks (gloo): the adapter's DiffusersBackend over a tiny
bundle of the real component classes, with parity before ready (pyworker/parity.py) holding the
layout to eager on one rank. For test_adapter.py's test_ulysses_2_is_held_to_one_rank_by_parity.

Usage: tiny_minimax_parallel.py BUNDLE CASE [CASE ...]
  CASE "ulysses-2": the layout as the adapter applies it.
  CASE "local-attention": the layout applied, then every attention processor's _parallel_config
  dropped (what the fused processors once did to Wan and Qwen, issue #26): each rank attends
  over its own shard of the packed sequence only, and parity must refuse it.
The cases run in turn within the same two ranks (which import torch and diffusers once), each
on a backend loaded afresh; a refusal ends its case on both ranks at the same point, and the
ranks go on to the next.
Prints one JSON line per case and rank: {"case", "rank", "parity"} or {"case", "rank", "error"}.

diffusers' context parallelism is made to run on a CPU by pyworker.testing.cpu_context_parallelism.
"""

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # models/minimax
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # models/


CASES = ("ulysses-2", "local-attention")


def rank_main(rank, bundle, cases, d):
    import torch
    import torch.distributed as dist

    import adapter
    from pyworker import testing

    testing.cpu_context_parallelism(torch)
    os.environ["MEDIAQUAL_RANK"] = str(rank)
    dist.init_process_group("cpu:gloo", init_method="file://" + os.path.join(d, "store"), rank=rank, world_size=2)
    apply_layout = adapter.DiffusersBackend.apply_layout

    def local(self, pipe, layout):
        apply_layout(self, pipe, layout)
        for m in pipe.transformer.modules():
            if getattr(getattr(m, "processor", None), "_parallel_config", None) is not None:
                m.processor._parallel_config = None

    for case in cases:
        adapter.DiffusersBackend.apply_layout = local if case == "local-attention" else apply_layout
        try:
            b = adapter.DiffusersBackend(adapter.Config(bundle, device="cpu", offload="none", layout="ulysses-2",
                                                        warmup_size="64x32", warmup_frames=124))
            report = {"case": case, "rank": rank, "parity": b.parity}
            del b
        except Exception as e:  # parity's refusal, on both ranks at the same point
            report = {"case": case, "rank": rank, "error": "%s: %s" % (type(e).__name__, e)}
        finally:
            adapter.DiffusersBackend.apply_layout = apply_layout
        # A file a rank: two ranks printing at once can share a line.
        with open(os.path.join(d, "%s-rank%d.json" % (case, rank)), "w") as f:
            json.dump(report, f)


def main():
    import torch.multiprocessing as mp

    bundle, cases = sys.argv[1], sys.argv[2:]
    unknown = [c for c in cases if c not in CASES]
    if not cases or unknown:
        raise SystemExit("cases %s: each one of %s\n%s" % (unknown, ", ".join(CASES), __doc__))
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(rank_main, args=(bundle, cases, d), nprocs=2)
        for case in cases:
            for rank in range(2):
                with open(os.path.join(d, "%s-rank%d.json" % (case, rank))) as f:
                    print(f.read())


if __name__ == "__main__":
    main()
