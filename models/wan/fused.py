"""Wan's fused engine (regional-compile-fused-graphs): self-attention's q/k RMS norm and RoPE
as pyworker/fused.py's norm_rope, and the feed-forward's tanh GELU in its matmul's epilogue.

diffusers 0.42.1's WanAttnProcessor normalises q and k across all heads (torch.nn.RMSNorm over
heads x head_dim, rounded to bf16), then rotates each interleaved pair (x1, x2) of every head
by the token's angle in fp32 and rounds again: norm_rope with the row as one norm group.
FusedSelfAttention is the processor with that kernel in its self-attention; cross-attention and
anything else go to diffusers' own code.
"""

import torch
from diffusers.models.transformers.transformer_wan import WanAttnProcessor, _get_qkv_projections
from diffusers.models.attention_dispatch import dispatch_attention_fn

from pyworker import fused


def norm_rope(x, norm, cos, sin, head_dim):
    """x normed across heads by norm (torch.nn.RMSNorm) and rotated by Wan's cos and sin tables."""
    return fused.norm_rope(x, norm.weight, cos, sin, norm.eps, head_dim, x.shape[-1], False)


class FusedSelfAttention(WanAttnProcessor):
    """WanAttnProcessor with norm_q/norm_k and RoPE of self-attention as norm_rope."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        if encoder_hidden_states is not None or rotary_emb is None or attn.add_k_proj is not None:
            return super().__call__(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        query, key, value = _get_qkv_projections(attn, hidden_states, None)
        head_dim = query.shape[-1] // attn.heads
        cos, sin = rotary_emb
        fused.check(query, attn.norm_q.weight, cos, sin, head_dim, query.shape[-1])  # settled when compiled
        query = norm_rope(query, attn.norm_q, cos, sin, head_dim).unflatten(2, (attn.heads, -1))
        key = norm_rope(key, attn.norm_k, cos, sin, head_dim).unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))
        hidden_states = dispatch_attention_fn(query, key, value, attn_mask=attention_mask, dropout_p=0.0, is_causal=False,
                                              backend=self._attention_backend, parallel_config=self._parallel_config)
        hidden_states = hidden_states.flatten(2, 3).type_as(query)
        hidden_states = attn.to_out[0](hidden_states)
        return attn.to_out[1](hidden_states)


def apply(transformer):
    """Every attention module of the transformer gets FusedSelfAttention, every feed-forward's
    tanh GELU layer linear_gelu; returns how many of each."""
    from diffusers.models.transformers.transformer_wan import WanAttention

    gelus = fused.fuse_gelus(transformer)
    n = 0
    for m in transformer.modules():
        if isinstance(m, WanAttention):
            if not isinstance(m.norm_q, torch.nn.RMSNorm) or m.norm_q.eps is None:
                raise RuntimeError("fused engine: %s's q norm is %s, not the RMSNorm across heads it fuses" % (
                    type(m).__name__, type(m.norm_q).__name__))
            fused.set_processor(m, FusedSelfAttention())
            n += 1
    return {"self-attention q/k norm and RoPE": n, "feed-forward GELU": gelus}
