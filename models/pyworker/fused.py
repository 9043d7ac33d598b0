"""Kernels of the families' fused engines (regional-compile-fused-graphs): a q/k RMS norm and
its RoPE as one Triton kernel, and the tanh GELU in its matmul's epilogue. Each family's
fused.py puts them into its own attention processor and feed-forward (models/wan/fused.py,
models/qwenimage/fused.py).

norm_rope: inductor compiles a q/k RMS norm followed by a RoPE of interleaved pairs into a
reduction kernel that reached about 590 GB/s on the H200 at Wan2.1's pinned shape
(scripts/gpu-runs/rope_probe.py: 0.175 ms a call, 10.5 ms of a 118 ms step's kernels). Here
one program holds one token's row, so the row is read once and written once. The row is
normed in groups of `group` values (Wan: the whole row, across heads; Qwen-Image: each head),
each group with the same weight of `group` values: y = x * rsqrt(mean(x^2) + eps) * w in fp32,
rounded to bf16 (torch.nn.RMSNorm, as inductor computes it) or with x * rsqrt(...) rounded to
bf16 before the weight (round_normed: diffusers' RMSNorm with a bf16 weight). Then each
interleaved pair (y1, y2) of every head turns by its token's angle in fp32 and is rounded
again: (y1 c - y2 s, y1 s + y2 c), with c = cos[t * head_dim + 2j] and s = sin[t * head_dim +
2j + 1] for pair j of a head (Wan's (1, tokens, 1, head_dim) cos and sin tables as its
processor reads them, cos[..., 0::2] and sin[..., 1::2]; Qwen's complex (tokens, head_dim / 2)
table as view_as_real, one tensor for both). The order of the mean's sum (and where the
compiler fuses a multiply into an add) may differ from inductor's, so bytes differ from the
compiled processor's in the last bits, and repeat: one program a row, one fixed reduction.
Triton runs CPU tensors under TRITON_INTERPRET=1, which the CPU tests use.

linear_gelu: diffusers' GELU module (a Linear, then the tanh GELU) writes its matmul's bf16
output and reads it back for the GELU, a pointwise kernel of 5.1 ms of Wan2.1's step. This is
torch's _addmm_activation, which on CUDA applies the tanh GELU in cuBLASLt's epilogue to the
fp32 accumulator: one rounding instead of two, so other bytes.
"""

import os

import torch
import triton
import triton.language as tl

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
               EPS: tl.constexpr, DIM: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
               GPP: tl.constexpr, GPP_P2: tl.constexpr, PAIRS_P2: tl.constexpr, ROUND_NORMED: tl.constexpr):
    row = tl.program_id(0)  # batch * tokens + token
    k = tl.arange(0, GPP_P2)[:, None]  # this program's GPP norm groups (padded to a power of 2)
    g = tl.program_id(1) * GPP + k  # norm group in the row
    j = tl.arange(0, PAIRS_P2)[None, :]  # pair in the group (padded likewise)
    live = (k < GPP) & (g < DIM // GROUP) & (j < GROUP // 2)
    at = row.to(tl.int64) * DIM + g * GROUP + 2 * j
    x1 = tl.load(x_ptr + at, mask=live, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + at + 1, mask=live, other=0.0).to(tl.float32)
    # EPS a constant: a float argument reached the compiled kernel as fp64, which made the sum fp64
    rstd = tl.math.rsqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / GROUP + EPS)[:, None]
    w1 = tl.load(w_ptr + 2 * j, mask=j < GROUP // 2, other=0.0).to(tl.float32)
    w2 = tl.load(w_ptr + 2 * j + 1, mask=j < GROUP // 2, other=0.0).to(tl.float32)
    if ROUND_NORMED:
        y1 = _bf16(_bf16(x1 * rstd) * w1)
        y2 = _bf16(_bf16(x2 * rstd) * w2)
    else:
        y1 = _bf16(x1 * rstd * w1)
        y2 = _bf16(x2 * rstd * w2)
    angle = (row % tokens).to(tl.int64) * HEAD_DIM + (g * GROUP + 2 * j) % HEAD_DIM
    c = tl.load(cos_ptr + angle, mask=live, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + angle + 1, mask=live, other=0.0).to(tl.float32)
    tl.store(out_ptr + at, _bf16(y1 * c - y2 * s).to(tl.bfloat16), mask=live)
    tl.store(out_ptr + at + 1, _bf16(y1 * s + y2 * c).to(tl.bfloat16), mask=live)


# (groups a program, warps) by the row's number of norm groups, from
# scripts/gpu-runs/norm_rope_probe.py on the H200 (ms a call at the pinned shapes): Wan2.1's one
# group, 4 warps 0.0715, 8 warps 0.051 (kept at 4: the engine's published bytes); Qwen-Image's 24
# heads, 2 heads with 2 warps 0.0646, all 24 in one program 0.42 (inductor's form 0.137). On the
# GPU the launch changes the reduction's order, so it is part of the bytes. A count not here gets
# all its groups in one program with 4 warps.
LAUNCH = {1: (1, 4), 24: (2, 2)}


@torch.library.triton_op("mediaqual::norm_rope", mutates_args=())
def norm_rope(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
              head_dim: int, group: int, round_normed: bool, groups_per_program: int = 0,
              num_warps: int = 0) -> torch.Tensor:
    """x: (batch, tokens, heads * head_dim) bf16; weight: (group,); cos, sin: tokens * head_dim
    values each, fp32 or bf16 (the products are fp32 either way, as inductor computes them), laid
    out as the module doc says. Returns x normed and rotated, same shape. groups_per_program and
    num_warps (0: LAUNCH's) set the launch."""
    batch, tokens, dim = x.shape
    groups = dim // group
    gpp, warps = LAUNCH.get(groups, (groups, 4))
    gpp, warps = groups_per_program or gpp, num_warps or warps
    out = torch.empty_like(x)
    # The interpreter's kernels are not jit functions, which wrap_triton (for torch.compile) wants.
    launch = _norm_rope if INTERPRETED else torch.library.wrap_triton(_norm_rope)
    launch[(batch * tokens, triton.cdiv(groups, gpp))](
        x, weight, cos, sin, out, tokens, EPS=eps, DIM=dim, GROUP=group, HEAD_DIM=head_dim, GPP=gpp,
        GPP_P2=triton.next_power_of_2(gpp), PAIRS_P2=triton.next_power_of_2(group // 2), ROUND_NORMED=round_normed,
        num_warps=warps)
    return out


def check(x, weight, cos, sin, head_dim, group):
    """What norm_rope assumes of its arguments, as an error naming the difference."""
    problems = []
    if x.dtype != torch.bfloat16 or not x.is_contiguous() or x.dim() != 3:
        problems.append("x %s %s contiguous=%s (want 3-d contiguous bf16)" % (tuple(x.shape), x.dtype, x.is_contiguous()))
    elif x.shape[-1] % group or x.shape[-1] % head_dim or group % 2:
        problems.append("a row of %d in norm groups of %d with heads of %d" % (x.shape[-1], group, head_dim))
    if weight.shape != (group,):
        problems.append("norm weight %s for groups of %d" % (tuple(weight.shape), group))
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dtype not in (torch.float32, torch.bfloat16) or t.numel() != x.shape[1] * head_dim or not t.is_contiguous():
            problems.append("rotary %s %s %s (want contiguous fp32 or bf16, %d tokens x %d)" % (
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


@linear_gelu.register_fake
def _(x, weight, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


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


def fuse_gelus(transformer):
    """Every tanh GELU layer (diffusers' GELU module) of the transformer computes through
    linear_gelu; returns how many."""
    from diffusers.models.activations import GELU

    n = 0
    for m in transformer.modules():
        if isinstance(m, GELU):
            if m.approximate != "tanh" or m.proj.bias is None:
                raise RuntimeError("fused engine: a GELU layer with approximate=%r, bias %s: linear_gelu is the "
                                   "biased tanh GELU" % (m.approximate, m.proj.bias is not None))
            m.forward = _gelu_forward(m)
            n += 1
    return n


def _gelu_forward(module):
    def forward(hidden_states):
        return linear_gelu(hidden_states, module.proj.weight, module.proj.bias)
    return forward


def set_processor(module, processor):
    """module.set_processor(processor), carrying over what diffusers recorded on the processor
    it replaces: enable_parallelism's _parallel_config (without it, under ulysses-N, attention
    runs over each rank's own shard of the sequence, silently) and set_attention_backend's
    _attention_backend. So the engine is right whether it comes before the layout or after."""
    old = module.processor
    for attr in ("_parallel_config", "_attention_backend"):
        setattr(processor, attr, getattr(old, attr, None))
    module.set_processor(processor)
