#!/usr/bin/env python3
"""A fake multi-rank worker for the tests of ranks.py (test_ranks.py, ranks_test.go): the real
protocol loop and group on the CPU (gloo), with a family whose every step is an all_reduce
over the ranks, so a frame exists only if every rank took part.

Frames: num_frames frames of WxH, every byte = (sum over ranks of rank+1) * steps mod 256
(2 ranks, 3 steps: 9). Prompts steer failures:
  "slow"              sleep 0.2 s a step (time to cancel)
  "crash rank R"      rank R exits with status 7 at step 1
  "raise rank R"      rank R raises RuntimeError at step 1
  "mismatch rank R"   rank R raises JobError after the last step (rank 0: a frame check's failure)
Each rank logs "rank R stopped at step S" on stderr when a job is cancelled, and
"rank R finished job J" when it ends one.
$RANKED_FAIL_LOAD_RANK=R makes rank R's load fail; $RANKED_SLOW_START_S=S makes ranks 1.. start
S seconds late (a loaded host).

Usage: ranked_worker.py --layout ulysses-2 (any layout of ranks.py; the layout is only its
degree here).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # models/

from pyworker import ranks  # noqa: E402
from pyworker import worker as pw  # noqa: E402

log = pw.logger("ranked-worker")


class Family:
    precision = "fp32"

    def __init__(self, layout):
        self.layout = layout
        self.rank = ranks.rank_from_env()

    def load(self):
        if os.environ.get("RANKED_FAIL_LOAD_RANK") == str(self.rank):
            raise RuntimeError("no weights on rank %d" % self.rank)
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist

    def ready_info(self):
        return {"layout": self.layout}

    def run(self, settings, reference, progress, cancelled):
        torch, dist = self.torch, self.dist
        prompt = settings["prompt"]
        w, h = pw.parse_size(settings["size"])
        frames, steps = settings["num_frames"], settings["num_inference_steps"]
        if cancelled():
            raise pw.Cancelled(0, "cancelled before it started")
        acc = 0
        t0 = time.perf_counter()
        for i in range(steps):
            if i == 1 and prompt == "crash rank %d" % self.rank:
                os._exit(7)
            if i == 1 and prompt == "raise rank %d" % self.rank:
                raise RuntimeError("pipeline broke on rank %d" % self.rank)
            t = torch.tensor([self.rank + 1], dtype=torch.int64)
            dist.all_reduce(t)
            acc += int(t.item())
            if prompt == "slow":
                time.sleep(0.2)
            progress(i + 1, steps)
            if cancelled():
                log("rank %d stopped at step %d" % (self.rank, i + 1))
                raise pw.Cancelled(i + 1)
        if prompt == "mismatch rank %d" % self.rank:
            # As a frame check does on rank 0 after the collectives (a streamed-frames mismatch,
            # a frame write, a size change): the other ranks finished the job normally.
            raise pw.JobError("stream_mismatch", "frames do not match on rank %d" % self.rank)
        log("rank %d finished a job" % self.rank)
        import numpy as np

        video = np.full((frames, h, w, 3), acc % 256, dtype=np.uint8)
        actual = {"num_frames": frames, "width": w, "height": h, "fps": settings["fps"],
                  "duration_s": frames / settings["fps"], "num_inference_steps": steps,
                  "guidance": float(settings["guidance"]), "seed": settings["seed"], "precision": "fp32",
                  "layout": self.layout}
        return pw.Output(video, actual, (time.perf_counter() - t0) * 1000, 0.0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layout", type=pw.layout_arg, required=True)
    args = p.parse_args()
    if ranks.rank_from_env() != 0:
        time.sleep(float(os.environ.get("RANKED_SLOW_START_S", 0)))
    pw.main(lambda proto: pw.Worker(proto, Family(args.layout), log), args.layout, cuda=False)


if __name__ == "__main__":
    main()
