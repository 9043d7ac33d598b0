"""How long one full garbage collection takes in a worker's heap, before and after gc.freeze()
(what models/pyworker/worker.py settle_heap() does after load). Run with the CPU torch
virtualenv (make torch):  .cache/torch-2.11.0/bin/python scripts/gc-pause.py
The heap here is the imports a worker makes (torch, diffusers, transformers, dynamo and
inductor, as regional-compile loads them); a loaded pipeline adds to it."""

import gc
import time

t0 = time.perf_counter()
import diffusers  # noqa: E402,F401
import torch  # noqa: E402,F401
import torch._dynamo  # noqa: E402,F401
import torch._inductor  # noqa: E402,F401
import transformers  # noqa: E402,F401
from diffusers import WanPipeline  # noqa: E402,F401

print("imports: %.1f s" % (time.perf_counter() - t0))


def full_collection_ms():
    a = time.perf_counter()
    gc.collect()
    return (time.perf_counter() - a) * 1000.0


for _ in range(3):
    print("full collection: %.1f ms over %d tracked objects" % (full_collection_ms(), len(gc.get_objects())))
gc.freeze()
for _ in range(3):
    print("after gc.freeze(): %.1f ms (%d objects frozen)" % (full_collection_ms(), gc.get_freeze_count()))
