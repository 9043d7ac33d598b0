"""Wan's self-attention q/k RMS norm and RoPE as one Triton kernel, and the feed-forward's
tanh GELU in its first matmul's epilogue (the "fused" engine).

diffusers 0.42.1's WanAttnProcessor normalises q and k across all heads (RMSNorm over heads x
head_dim, rounded to bf16), then rotates each interleaved pair (x1, x2) of every head by the
token's angle in fp32 and rounds again. Inductor fuses that into a reduction kernel that
reached about 590 GB/s on the H200 at Wan2.1's pinned shape (scripts/gpu-runs/rope_probe.py:
0.175 ms a call, 10.5 ms of a 118 ms step's kernels). Here one program holds one token's row,
so the row is read once and written once. The arithmetic and its roundings are the
processor's: y = bf16(x * rsqrt(mean(x^2) + eps) * w) in fp32, then bf16(y1 cos - y2 sin) and
bf16(y1 sin + y2 cos) in fp32 with cos and sin taken as the processor takes them
(cos[..., 0::2], sin[..., 1::2]). The order of the mean's sum (and where the compiler fuses a
multiply into an add) may differ, so bytes differ from the compiled processor's in the last
bits, and repeat: one program a row, one fixed reduction. Triton runs CPU tensors under
TRITON_INTERPRET=1, which the CPU tests use.

FusedSelfAttention is the processor with that kernel in its self-attention; cross-attention and
anything else go to diffusers' own code.

The feed-forward's first layer (diffusers' GELU module: a Linear, then the tanh GELU) wrote its
matmul's bf16 output and read it back for the GELU, a pointwise kernel of 5.1 ms a step
(scripts/gpu-runs/speed.py wan ... +profile). linear_gelu is torch's _addmm_activation, which on CUDA applies the tanh
GELU in cuBLASLt's epilogue to the fp32 accumulator: one rounding instead of two, so other
bytes.
"""

import os

import torch
import triton
import triton.language as tl
from diffusers.models.transformers.transformer_wan import WanAttnProcessor, _get_qkv_projections
from diffusers.models.attention_dispatch import dispatch_attention_fn

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _bf16(v):
    """fp32 to the nearest bf16 (ties to even), still as fp32: what the GPU's conversion does,
    written out because Triton's interpreter truncates instead."""
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _norm_rope(x_ptr, w_ptr, cos_ptr, sin_ptr, out_ptr, tokens,
               EPS: tl.constexpr, DIM: tl.constexpr, HEAD_DIM: tl.constexpr, PAIRS: tl.constexpr):
    row = tl.program_id(0)  # batch * tokens + token
    p = tl.arange(0, PAIRS)  # pair index in the row; PAIRS is DIM // 2 rounded up to a power of 2
    live = p < DIM // 2
    base = row.to(tl.int64) * DIM
    x1 = tl.load(x_ptr + base + 2 * p, mask=live, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + base + 2 * p + 1, mask=live, other=0.0).to(tl.float32)
    # EPS a constant: a float argument reached the compiled kernel as fp64, which made the sum fp64
    rstd = tl.math.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / DIM + EPS)
    w1 = tl.load(w_ptr + 2 * p, mask=live, other=0.0).to(tl.float32)
    w2 = tl.load(w_ptr + 2 * p + 1, mask=live, other=0.0).to(tl.float32)
    y1 = _bf16(x1 * rstd * w1)
    y2 = _bf16(x2 * rstd * w2)
    angle = (row % tokens).to(tl.int64) * HEAD_DIM + 2 * (p % (HEAD_DIM // 2))
    c = tl.load(cos_ptr + angle, mask=live, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + angle + 1, mask=live, other=0.0).to(tl.float32)
    tl.store(out_ptr + base + 2 * p, _bf16(y1 * c - y2 * s).to(tl.bfloat16), mask=live)
    tl.store(out_ptr + base + 2 * p + 1, _bf16(y1 * s + y2 * c).to(tl.bfloat16), mask=live)


@torch.library.triton_op("mediaqual::wan_norm_rope", mutates_args=())
def norm_rope(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
              head_dim: int) -> torch.Tensor:
    """x: (batch, tokens, heads * head_dim) bf16; weight: (heads * head_dim,); cos, sin: the
    rotary embedding's (1, tokens, 1, head_dim), fp32 or bf16 (the products are fp32 either
    way, as inductor computes them). Returns x normed and rotated, same shape."""
    batch, tokens, dim = x.shape
    out = torch.empty_like(x)
    # The interpreter's kernels are not jit functions, which wrap_triton (for torch.compile) wants.
    launch = _norm_rope if INTERPRETED else torch.library.wrap_triton(_norm_rope)
    launch[(batch * tokens,)](
        x, weight, cos, sin, out, tokens, EPS=eps, DIM=dim, HEAD_DIM=head_dim, PAIRS=triton.next_power_of_2(dim // 2))
    return out


def check(x, weight, cos, sin, head_dim):
    """What the kernel assumes of its arguments, as an error naming the difference."""
    problems = []
    if x.dtype != torch.bfloat16 or not x.is_contiguous() or x.dim() != 3:
        problems.append("x %s %s contiguous=%s (want 3-d contiguous bf16)" % (tuple(x.shape), x.dtype, x.is_contiguous()))
    if weight.shape != (x.shape[-1],):
        problems.append("norm weight %s for a row of %d" % (tuple(weight.shape), x.shape[-1]))
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dtype not in (torch.float32, torch.bfloat16) or tuple(t.shape) != (1, x.shape[1], 1, head_dim) or not t.is_contiguous():
            problems.append("rotary %s %s %s (want contiguous fp32 or bf16 (1, %d, 1, %d))" % (
                name, tuple(t.shape), t.dtype, x.shape[1], head_dim))
    if problems:
        raise RuntimeError("fused q/k norm and RoPE cannot take " + "; ".join(problems))


@torch.library.custom_op("mediaqual::linear_gelu_tanh", mutates_args=())
def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x @ weight.T + bias, approximate="tanh"), the GELU in the matmul's epilogue on CUDA.
    An opaque op, so that the compiler keeps the matmul and its epilogue together. On a CPU
    torch's _addmm_activation applies the erf GELU instead, so there it is the plain formula."""
    if not x.is_cuda:
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, weight, bias), approximate="tanh")
    out = torch._addmm_activation(bias, x.reshape(-1, x.shape[-1]), weight.t(), use_gelu=True)
    return out.view(*x.shape[:-1], weight.shape[0])


def verify_gelu(device):
    """linear_gelu on the device against the tanh and erf GELUs of the plain matmul, in fp32
    (where the two GELUs differ by about 2e-4 relative, far above the matmul's own error);
    raises unless it is the tanh one. Returns the relative difference."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(64, 256, device=device, generator=g)
    w = torch.randn(512, 256, device=device, generator=g) / 16
    b = torch.randn(512, device=device, generator=g)
    plain = torch.nn.functional.linear(x, w, b)
    got = linear_gelu(x, w, b)
    rel = {a: float((got - torch.nn.functional.gelu(plain, approximate=a)).norm() / got.norm()) for a in ("tanh", "none")}
    if not rel["tanh"] < rel["none"] / 10:
        raise RuntimeError("fused engine: linear_gelu on %s is not the tanh GELU (relative difference %.2g to tanh, "
                           "%.2g to erf)" % (device, rel["tanh"], rel["none"]))
    return rel["tanh"]


@linear_gelu.register_fake
def _(x, weight, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def _gelu_forward(module):
    def forward(hidden_states):
        return linear_gelu(hidden_states, module.proj.weight, module.proj.bias)
    return forward


class FusedSelfAttention(WanAttnProcessor):
    """WanAttnProcessor with norm_q/norm_k and RoPE of self-attention as norm_rope."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        if encoder_hidden_states is not None or rotary_emb is None or attn.add_k_proj is not None:
            return super().__call__(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        query, key, value = _get_qkv_projections(attn, hidden_states, None)
        head_dim = query.shape[-1] // attn.heads
        cos, sin = rotary_emb
        check(query, attn.norm_q.weight, cos, sin, head_dim)  # shapes and dtypes: settled when compiled
        query = norm_rope(query, attn.norm_q.weight, cos, sin, attn.norm_q.eps, head_dim).unflatten(2, (attn.heads, -1))
        key = norm_rope(key, attn.norm_k.weight, cos, sin, attn.norm_k.eps, head_dim).unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))
        hidden_states = dispatch_attention_fn(query, key, value, attn_mask=attention_mask, dropout_p=0.0, is_causal=False,
                                              backend=self._attention_backend, parallel_config=self._parallel_config)
        hidden_states = hidden_states.flatten(2, 3).type_as(query)
        hidden_states = attn.to_out[0](hidden_states)
        return attn.to_out[1](hidden_states)


def apply(transformer):
    """Every attention module of the transformer gets FusedSelfAttention, every feed-forward's
    tanh GELU layer linear_gelu; returns how many of each."""
    from diffusers.models.activations import GELU
    from diffusers.models.transformers.transformer_wan import WanAttention

    gelus = 0
    for m in transformer.modules():
        if isinstance(m, GELU):
            if m.approximate != "tanh" or m.proj.bias is None:
                raise RuntimeError("fused engine: a GELU layer with approximate=%r, bias %s: linear_gelu is the "
                                   "biased tanh GELU" % (m.approximate, m.proj.bias is not None))
            m.forward = _gelu_forward(m)
            gelus += 1
    n = 0
    for m in transformer.modules():
        if isinstance(m, WanAttention):
            if not isinstance(m.norm_q, torch.nn.RMSNorm) or m.norm_q.eps is None:
                raise RuntimeError("fused engine: %s's q norm is %s, not the RMSNorm across heads it fuses" % (
                    type(m).__name__, type(m.norm_q).__name__))
            m.set_processor(FusedSelfAttention())
            n += 1
    return n, gelus
