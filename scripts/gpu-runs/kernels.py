#!/usr/bin/env python3
"""The fused engines' kernels (models/pyworker/fused.py) against eager diffusers 0.42.1 at every
row's real shapes, on the device:
    python3 scripts/gpu-runs/kernels.py [--small]      (bash scripts/gpu-runs/kernels.sh on the H200)

Each case computes one kernel's output three ways from the same bf16 inputs: the kernel; eager
bf16, as diffusers' processor computes it; and the same formula in fp32 (the inputs upcast). It
prints a JSON line a case: the kernel's relative L2 distance and max abs difference to eager bf16,
and each bf16 path's relative L2 distance to fp32. The bound is parity's (models/pyworker/
parity.py): the kernel is no farther from fp32 than FACTOR times eager bf16 is, since a correct
kernel is another rounding of the same arithmetic. Exit status 1 when any case is outside it.

Cases (the pinned shapes of models/*/: Wan2.1 832x480x17, Wan2.2 1280x704x121, Qwen-Image-Edit
1024x1024 with its reference):
  norm_rope   Wan2.1 7,800 tokens x 12 heads of 128, normed across heads, Wan's RoPE tables;
              Wan2.2 27,280 tokens x 24 heads (3,072 wide); Qwen's image stream (8,192 tokens, 24
              heads normed each, the complex table of QwenEmbedRope) and its text stream (217
              tokens, the text table)
  linear_gelu each row's feed-forward: Wan2.1 1536->8960, Wan2.2 3072->14336, Qwen 3072->12288
--small runs the same cases at a few tokens (a CPU under TRITON_INTERPRET=1: a smoke test of
the script, where linear_gelu is the plain formula).
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))

from pyworker import fused, parity  # noqa: E402

FACTOR = parity.FLOOR_FACTOR
SMALL = "--small" in sys.argv
DEV = "cpu" if SMALL else "cuda:0"


def compare(name, shape, kernel, eager, fp32):
    k2e = parity.relative_l2(kernel, eager)
    e2f = parity.relative_l2(eager, fp32)
    k2f = parity.relative_l2(kernel, fp32)
    ok = k2f <= FACTOR * e2f
    line = {"case": name, "shape": shape, "kernel_to_eager": k2e, "max_abs_to_eager": parity.max_abs(kernel, eager),
            "values_differing": int((kernel != eager).sum()), "values": kernel.numel(),
            "eager_to_fp32": e2f, "kernel_to_fp32": k2f, "bound": FACTOR * e2f, "passed": bool(ok)}
    print(json.dumps(line), flush=True)
    return ok


def wan_case(name, heads, frames, height, width):
    """Wan's q path: norm_q (torch.nn.RMSNorm across heads) then the processor's RoPE, at the
    latent grid of a frames x height x width clip (VAE 4x time, 16x space for Wan2.2's 48
    channels, 8x for Wan2.1's 16; patch 1x2x2)."""
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    from wan import fused as wan_fused

    spatial = 16 if heads == 24 else 8
    grid = ((frames - 1) // 4 + 1, height // spatial, width // spatial)
    if SMALL:
        grid = (2, 4, 6)
    rope = WanRotaryPosEmbed(128, (1, 2, 2), 1024).to(DEV)
    cos, sin = rope(torch.empty(1, 4, *grid, device=DEV))
    tokens = cos.shape[1]
    g = torch.Generator(device=DEV).manual_seed(0)
    x = (3 * torch.randn(1, tokens, heads * 128, device=DEV, generator=g)).bfloat16()
    norm = torch.nn.RMSNorm(heads * 128, eps=1e-6).to(DEV)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(heads * 128, device=DEV, generator=g))

    def eager(x, norm, cos, sin):  # WanAttnProcessor: norm across heads, unflatten, apply_rotary_emb
        y = norm(x).unflatten(2, (heads, -1))
        x1, x2 = y.unflatten(-1, (-1, 2)).unbind(-1)
        c, s = cos[..., 0::2], sin[..., 1::2]
        out = torch.empty_like(y)
        out[..., 0::2] = x1 * c - x2 * s
        out[..., 1::2] = x1 * s + x2 * c
        return out.type_as(y).flatten(2)

    with torch.no_grad():
        fused.check(x, norm.weight.bfloat16(), cos, sin, 128, x.shape[-1])
        bf = torch.nn.RMSNorm(heads * 128, eps=1e-6).to(DEV).bfloat16()
        bf.weight.copy_(norm.weight)
        kernel = wan_fused.norm_rope(x, bf, cos, sin, 128)
        return compare(name, [tokens, heads, 128], kernel, eager(x, bf, cos, sin), eager(x.float(), norm.float(), cos, sin))


def qwen_cases():
    """Qwen's q paths: diffusers' RMSNorm per head, then apply_rotary_emb_qwen(use_real=False),
    on the image stream (output and reference latents, 64x64 each at 1024²) and the text stream."""
    from diffusers.models.normalization import RMSNorm
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope, apply_rotary_emb_qwen

    from qwenimage import fused as qwen_fused

    side, txt = (4, 7) if SMALL else (64, 217)
    rope = QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56], scale_rope=True)
    img_freqs, txt_freqs = rope([[(1, side, side), (1, side, side)]], max_txt_seq_len=txt, device=DEV)
    ok = True
    g = torch.Generator(device=DEV).manual_seed(1)
    for stream, freqs in (("image", img_freqs), ("text", txt_freqs)):
        tokens = freqs.shape[0]
        x = (3 * torch.randn(1, tokens, 24 * 128, device=DEV, generator=g)).bfloat16()
        norm = RMSNorm(128, eps=1e-6).to(DEV)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.1 * torch.randn(128, device=DEV, generator=g))
        bf = RMSNorm(128, eps=1e-6).to(DEV).bfloat16()
        with torch.no_grad():
            bf.weight.copy_(norm.weight)

        def eager(x, norm):
            return apply_rotary_emb_qwen(norm(x.unflatten(-1, (-1, 128))), freqs, use_real=False).flatten(2)

        with torch.no_grad():
            table = torch.view_as_real(freqs)
            fused.check(x, bf.weight, table, table, 128, 128)
            kernel = qwen_fused.norm_rope(x, bf, freqs, 128)
            ok &= compare("norm_rope qwen-image-edit-2511 %s" % stream, [tokens, 24, 128], kernel, eager(x, bf),
                          eager(x.float(), norm.float()))
    return ok


def gelu_case(name, dim, ffn, tokens):
    """diffusers' GELU module (Linear, then the tanh GELU) against fused.linear_gelu."""
    if SMALL:
        tokens = 16
    g = torch.Generator(device=DEV).manual_seed(2)
    x = torch.randn(1, tokens, dim, device=DEV, generator=g).bfloat16()
    w = (torch.randn(ffn, dim, device=DEV, generator=g) / dim ** 0.5).bfloat16()
    b = (0.1 * torch.randn(ffn, device=DEV, generator=g)).bfloat16()
    gelu = torch.nn.functional.gelu
    with torch.no_grad():
        kernel = fused.linear_gelu(x, w, b)
        eager = gelu(torch.nn.functional.linear(x, w, b), approximate="tanh")
        fp32 = gelu(torch.nn.functional.linear(x.float(), w.float(), b.float()), approximate="tanh")
    return compare(name, [tokens, dim, ffn], kernel, eager, fp32)


def main():
    if not SMALL:
        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 formula in fp32, not TF32
    ok = True
    ok &= wan_case("norm_rope wan2.1-t2v-1.3b", 12, 17, 480, 832)
    ok &= wan_case("norm_rope wan2.2-ti2v-5b", 24, 121, 704, 1280)
    ok &= qwen_cases()
    ok &= gelu_case("linear_gelu wan2.1-t2v-1.3b", 1536, 8960, 7800)
    ok &= gelu_case("linear_gelu wan2.2-ti2v-5b", 3072, 14336, 27280)
    ok &= gelu_case("linear_gelu qwen-image-edit-2511", 3072, 12288, 8192)
    print(json.dumps({"device": torch.cuda.get_device_name(0) if not SMALL else "cpu (interpreter)",
                      "torch": torch.__version__, "factor": FACTOR, "passed": bool(ok)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
