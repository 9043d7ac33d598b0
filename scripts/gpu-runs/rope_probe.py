#!/usr/bin/env python3
"""Wan2.1's self-attention prefix alone: q and k RMS-normed across heads, then rotated (RoPE), as
diffusers 0.42.1's WanAttnProcessor does, at the pinned shape (7,800 tokens, 12 heads of 128),
compiled as the adapter compiles (inductor, deterministic mode) and in other forms:
    python3 scripts/gpu-runs/rope_probe.py
Prints a JSON line a form: its GPU time a call (CUDA events, median of 5 runs of 100 calls), and
whether its q and k equal the diffusers form's bit for bit. The profile of a denoising step
(scripts/gpu-runs/speed.py wan ... +profile) put this fused kernel at about 10 ms of the step's 118 ms of kernels.
"""
import json
import statistics

import torch
import torch._inductor.config as inductor
import torch.nn.functional as F
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

HEADS, HEAD_DIM, EPS = 12, 128, 1e-6
DIM = HEADS * HEAD_DIM


def rope_diffusers(x, cos, sin):
    # WanAttnProcessor.__call__'s apply_rotary_emb, verbatim
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    cos = cos[..., 0::2]
    sin = sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out.type_as(x)


def rope_stack(x, cos, sin):
    # The same products and sums, written as one stack instead of two strided stores.
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    cos = cos[..., 0::2]
    sin = sin[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).type_as(x)


def rope_float_first(x, cos, sin):
    # x upcast once, then the same formula.
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    cos = cos[..., 0::2]
    sin = sin[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).type_as(x)


def prefix(rope):
    def f(q, k, wq, wk, cos, sin):
        q = F.rms_norm(q, (DIM,), wq, EPS).unflatten(2, (HEADS, -1))
        k = F.rms_norm(k, (DIM,), wk, EPS).unflatten(2, (HEADS, -1))
        return rope(q, cos, sin), rope(k, cos, sin)
    return f


def gpu_ms(fn, args, calls=100, runs=5):
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn(*args)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


def main():
    dev = "cuda:0"
    g = torch.Generator(device=dev).manual_seed(0)
    n = 5 * 30 * 52  # 832x480x17: 5 latent frames of 30x52 patches
    q = torch.randn(1, n, DIM, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, n, DIM, device=dev, dtype=torch.bfloat16, generator=g)
    wq = (1 + 0.1 * torch.randn(DIM, device=dev, generator=g)).to(torch.bfloat16)
    wk = (1 + 0.1 * torch.randn(DIM, device=dev, generator=g)).to(torch.bfloat16)
    cos, sin = WanRotaryPosEmbed(HEAD_DIM, (1, 2, 2), 1024).to(dev)(torch.empty(1, 16, 5, 60, 104, device=dev))
    args = (q, k, wq, wk, cos, sin)
    # Bytes moved a call: q and k read and written in bf16, cos and sin read in fp32.
    moved = 4 * q.numel() * 2 + 2 * cos.numel() * 4
    want = None
    with torch.inference_mode():
        for name, rope in (("diffusers", rope_diffusers), ("stack", rope_stack), ("float-first", rope_float_first)):
            for det in (True, False):
                torch._dynamo.reset()
                inductor.deterministic = det
                fn = torch.compile(prefix(rope), fullgraph=True)
                got = fn(*args)
                torch.cuda.synchronize()
                if want is None:
                    want = got
                same = all(torch.equal(a, b) for a, b in zip(got, want))
                ms = gpu_ms(fn, args)
                print(json.dumps({"form": name, "deterministic": det, "ms_a_call": round(ms, 4),
                                  "gb_per_s": round(moved / ms / 1e6, 1), "same_bytes_as_diffusers_deterministic": same}),
                      flush=True)
        eager = prefix(rope_diffusers)
        print(json.dumps({"form": "diffusers", "eager": True, "ms_a_call": round(gpu_ms(eager, args), 4),
                          "same_bytes_as_diffusers_deterministic": all(torch.equal(a, b) for a, b in zip(eager(*args), want))}),
              flush=True)


if __name__ == "__main__":
    main()
