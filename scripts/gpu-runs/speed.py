#!/usr/bin/env python3
"""A family's denoise speed under one runtime variant, in a process of its own (a fresh compile):
    python3 scripts/gpu-runs/speed.py FAMILY BUNDLE VARIANT [N]
FAMILY is wan (Wan2.1's pinned call: 832x480x17, 30 steps, guidance 5, seed 42, the first
fixture prompt) or qwenimage (Qwen-Image-Edit's: 1024x1024, 20 steps, guidance 4, seed 42, the
first fixture edit and its photograph). VARIANT is an engine (pyworker.worker.ENGINES),
optionally followed by +cfg-batch (parallel.CFGBatch: a step's two guidance branches as one
batch of two) and/or +autotune (regional-compile with inductor's timed kernel choices, which the
adapter turns off so that two processes get the same bytes) and/or +graphs (pyworker/graphs.py:
the transformer's forward as a CUDA graph) and/or +cudnn or +flash (the transformer's attention
through diffusers' _native_cudnn or _native_flash backend: torch's scaled-dot-product attention
held to that kernel family, where by default torch picks flash, then memory-efficient, math,
cuDNN, the first that takes the call) and/or +fuse (diffusers' fuse_qkv_projections, where the
family's attention has it) and/or +profile (after the jobs, one denoising step's two transformer
calls, those of the last job's first step, run again, timed on the host without the profiler,
then under torch.profiler: the GPU's kernel time by kind, GEMM, attention, Triton (inductor's fused kernels) and the rest, in ms a step, and the
longest kernels; docs/PERFORMANCE.md divides the GEMM and attention times by the family's
flops.go count). Loads the bundle as the adapter does, warms up at the pinned shape, then runs N
jobs of the pinned settings, printing one JSON line a job: its denoise per step, Task wall,
phases and output digest.
"""
import collections
import hashlib
import json
import os
import re
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "models"))

from pyworker import parallel, worker as pw  # noqa: E402

EXTRAS = {"cfg-batch", "autotune", "graphs", "cudnn", "flash", "fuse", "profile"}


def first_line(path):
    with open(os.path.join(ROOT, "fixtures", path)) as f:
        return json.loads(f.readline())


class Wan:
    steps = 30

    def __init__(self):
        from wan import adapter
        self.adapter = adapter

    def load(self, bundle, engine):
        return self.adapter.DiffusersBackend(self.adapter.Config(bundle, 3.0, "cuda:0", 2, engine, "832x480", 17))

    def kwargs(self, b):
        settings = {"size": "832x480", "num_frames": 17, "fps": 16, "num_inference_steps": self.steps, "guidance": 5.0,
                    "seed": 42, "prompt": first_line("prompts/t2v.jsonl")["text"]}
        return self.adapter.pipeline_kwargs(settings, b.generator, b.frame_step, b.size_multiple)


class QwenImage:
    steps = 20

    def __init__(self):
        from qwenimage import adapter
        self.adapter = adapter

    def load(self, bundle, engine):
        return self.adapter.DiffusersBackend(self.adapter.Config(bundle, "cuda:0", None, engine, "1024x1024"))

    def kwargs(self, b):
        edit = first_line("edits/photos.jsonl")
        settings = {"size": "1024x1024", "num_inference_steps": self.steps, "guidance": 4.0, "seed": 42,
                    "negative_prompt": " ", "prompt": edit["instruction"]}
        image = b.open_reference(os.path.join(ROOT, "fixtures", "images", edit["image"]))
        return self.adapter.pipeline_kwargs(settings, image, b.generator, b.size_multiple)


FAMILIES = {"wan": Wan, "qwenimage": QwenImage}


def main():
    family, bundle, variant = sys.argv[1], sys.argv[2], sys.argv[3]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    engine, *extras = variant.split("+")
    if family not in FAMILIES or engine not in pw.ENGINES or set(extras) - EXTRAS:
        sys.exit("unknown family %r or variant %r" % (family, variant))
    fam = FAMILIES[family]()
    base = fam.adapter.DiffusersBackend.apply_engine

    def apply_engine(self, pipe, engine):
        # The transformer's attention only (the text encoder's masked attention needs others),
        # before any compile traces it: diffusers' backends hold SDPA to one kernel family.
        for extra, backend in (("cudnn", "_native_cudnn"), ("flash", "_native_flash")):
            if extra in extras:
                pipe.transformer.set_attention_backend(backend)
        if "fuse" in extras:
            pipe.transformer.fuse_qkv_projections()
        if "cfg-batch" in extras:
            self.cfg_parallel = parallel.CFGBatch(pipe.transformer, self.torch)
        if "autotune" in extras:
            pipe.transformer.compile_repeated_blocks(fullgraph=True)
            self.engine = engine
        else:
            base(self, pipe, engine)
        if "graphs" in extras:
            self.graph_transformer(pipe)  # innermost, under any cfg-batch

    fam.adapter.DiffusersBackend.apply_engine = apply_engine
    t0 = time.perf_counter()
    b = fam.load(bundle, engine)
    ready_s = time.perf_counter() - t0
    step = StepCalls(b.pipe.transformer, b.torch) if "profile" in extras else None
    for i in range(n):
        kwargs = fam.kwargs(b)
        if step:
            step.calls.clear()
        b.marks.clear()
        t0 = time.perf_counter()
        out = b.call(kwargs)
        b.synchronize()
        t1 = time.perf_counter()
        phases = pw.phases_ms(b.marks, t0, t1)
        print(json.dumps({
            "family": family, "variant": variant, "job": i, "ready_s": round(ready_s, 1),
            "denoise_ms_per_step": round(phases["denoise"] / fam.steps, 1),
            "task_ms": round((t1 - t0) * 1000.0, 1), "phases_ms": phases,
            "frames_sha256": hashlib.sha256(memoryview(out)).hexdigest()[:16],
            "graphs": b.cuda_graphs.report() if b.cuda_graphs else None,
        }), flush=True)
    if step:
        print(json.dumps(dict(family=family, variant=variant, **step.profile())), flush=True)


class StepCalls:
    """Keeps the keyword arguments of a job's first two transformer calls (its first step's cond
    and uncond), to profile them again after the job."""

    KINDS = (("gemm", r"gemm|nvjet|cutlass|xmma|cublas"), ("attention", r"fmha|flash|sdpa|attention|attn"),
             ("triton", r"^triton"))

    def __init__(self, transformer, torch):
        self.torch, self.calls = torch, []
        self.forward = forward = transformer.forward

        def keep(*args, **kwargs):
            if len(self.calls) < 2 and not args:
                self.calls.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
            return forward(*args, **kwargs)

        transformer.forward = keep

    def profile(self):
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        if len(self.calls) != 2:
            raise RuntimeError("profile: a step made %d transformer calls, not 2" % len(self.calls))
        walls = []
        for _ in range(3):  # the two calls' wall without the profiler: the rest of a step is the pipeline's
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.inference_mode():
                for kw in self.calls:
                    self.forward(**kw)
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1000.0)
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            for kw in self.calls:
                self.forward(**kw)
            torch.cuda.synchronize()
        ms, top = collections.Counter(), collections.Counter()
        for e in prof.events():
            if e.device_type != torch.autograd.DeviceType.CUDA or e.device_time_total <= 0:
                continue
            kind = next((k for k, rx in self.KINDS if re.search(rx, e.name, re.I)), "other")
            ms[kind] += e.device_time_total / 1000.0
            top[e.name[:90]] += e.device_time_total / 1000.0
        return {"profile_ms_per_step": {k: round(v, 1) for k, v in ms.most_common()},
                "kernel_ms_per_step": round(sum(ms.values()), 1), "calls_wall_ms": [round(w, 1) for w in walls],
                "top": [(k, round(v, 2)) for k, v in top.most_common(16)]}


if __name__ == "__main__":
    main()
