#!/usr/bin/env python3
"""pyworker/fused.py's norm_rope at the pinned shapes, under each launch (norm groups a program,
warps), against the forms inductor and eager diffusers 0.42.1 give:
    python3 scripts/gpu-runs/norm_rope_probe.py
Qwen-Image-Edit at 1024x1024: the image stream's q, 8,192 tokens (output and reference latents)
of 24 heads of 128, each head RMS-normed (diffusers' RMSNorm), then the complex RoPE; Wan2.1 at
832x480x17: 7,800 tokens of 12 heads of 128 normed across heads, then its RoPE. Prints a JSON
line a form: its GPU time a call (CUDA events, median of 5 runs of 100 calls), the bandwidth
that is (x read and written in bf16, the tables read), and how many values differ from eager
diffusers' (Qwen) or from the kernel's default launch (Wan). The profile of Qwen's denoising step
(scripts/gpu-runs/speed.py qwenimage ... +profile) is where this kernel's time a step shows.
"""
import json
import os
import statistics
import sys

import torch
import torch._inductor.config as inductor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))

from pyworker import fused  # noqa: E402

DEV = "cuda:0"


def gpu_ms(fn, calls=100, runs=5):
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


def report(form, fn, moved, want):
    got = fn()
    torch.cuda.synchronize()
    ms = gpu_ms(fn)
    print(json.dumps({"form": form, "ms_a_call": round(ms, 4), "gb_per_s": round(moved / ms / 1e6, 1),
                      "values_differ": int((got != want).sum())}), flush=True)


def qwen(g):
    from diffusers.models.normalization import RMSNorm
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope, apply_rotary_emb_qwen

    heads, head_dim = 24, 128
    rope = QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56], scale_rope=True).to(DEV)
    freqs, _ = rope([[(1, 64, 64), (1, 64, 64)]], max_txt_seq_len=256, device=DEV)
    x = torch.randn(1, freqs.shape[0], heads * head_dim, device=DEV, dtype=torch.bfloat16, generator=g)
    norm = RMSNorm(head_dim, eps=1e-6).to(DEV, torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(head_dim, device=DEV, generator=g))

    def plain():
        return apply_rotary_emb_qwen(norm(x.unflatten(-1, (-1, head_dim))), freqs, use_real=False).flatten(2)

    table = torch.view_as_real(freqs)
    moved = 2 * x.numel() * 2 + table.numel() * 4
    want = plain()
    report("qwen diffusers eager", plain, moved, want)
    inductor.deterministic = True
    report("qwen diffusers compiled", torch.compile(plain, fullgraph=True), moved, want)
    for gpp, warps in ((1, 1), (1, 2), (2, 2), (2, 4), (4, 4), (8, 4), (8, 8), (24, 4), (24, 8), (24, 16)):
        report("qwen kernel %d groups, %d warps" % (gpp, warps),
               lambda: fused.norm_rope(x, norm.weight, table, table, norm.eps, head_dim, head_dim, True, gpp, warps),
               moved, want)


def wan(g):
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    heads, head_dim = 12, 128
    cos, sin = WanRotaryPosEmbed(head_dim, (1, 2, 2), 1024).to(DEV)(torch.empty(1, 16, 5, 60, 104, device=DEV))
    x = torch.randn(1, cos.shape[1], heads * head_dim, device=DEV, dtype=torch.bfloat16, generator=g)
    w = (1 + 0.1 * torch.randn(heads * head_dim, device=DEV, generator=g)).to(torch.bfloat16)
    moved = 2 * x.numel() * 2 + 2 * cos.numel() * 4
    want = fused.norm_rope(x, w, cos, sin, 1e-6, head_dim, heads * head_dim, False)
    for warps in (2, 4, 8, 16):
        report("wan kernel 1 group, %d warps" % warps,
               lambda: fused.norm_rope(x, w, cos, sin, 1e-6, head_dim, heads * head_dim, False, 1, warps), moved, want)


def main():
    g = torch.Generator(device=DEV).manual_seed(0)
    with torch.inference_mode():
        qwen(g)
        wan(g)


if __name__ == "__main__":
    main()
