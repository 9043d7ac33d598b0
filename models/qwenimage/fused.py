"""Qwen-Image's fused engine (regional-compile-fused-graphs): the joint attention's q/k RMS
norms and RoPE as pyworker/fused.py's norm_rope, and the feed-forwards' tanh GELU in their
matmul's epilogue.

diffusers 0.42.1's QwenDoubleStreamAttnProcessor2_0 normalises each head of q and k of both
streams (diffusers' RMSNorm over head_dim: x * rsqrt(mean(x^2) + eps) rounded to bf16, times the
bf16 weight, rounded again), then turns each interleaved pair by a complex64 angle of the token
(apply_rotary_emb_qwen with use_real=False: (y1 + i y2)(c + i s) in fp32, rounded to bf16):
norm_rope with heads as the norm groups, round_normed, and the complex table as view_as_real.
FusedJointAttention is that processor with norm_rope; with an attention mask, without rotary
embeddings, or with norms other than RMSNorm it is diffusers' own code.
"""

import torch
from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.normalization import RMSNorm
from diffusers.models.transformers.transformer_qwenimage import QwenDoubleStreamAttnProcessor2_0

from pyworker import fused


def norm_rope(x, norm, freqs, head_dim):
    """x normed head by head by norm (diffusers' RMSNorm) and turned by the complex freqs."""
    table = torch.view_as_real(freqs)
    return fused.norm_rope(x, norm.weight, table, table, norm.eps, head_dim, head_dim, True)


class FusedJointAttention(QwenDoubleStreamAttnProcessor2_0):
    """QwenDoubleStreamAttnProcessor2_0 with the q/k norms and RoPE of both streams as norm_rope."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, encoder_hidden_states_mask=None,
                 attention_mask=None, image_rotary_emb=None):
        if encoder_hidden_states is None or encoder_hidden_states_mask is not None or attention_mask is not None \
                or image_rotary_emb is None:
            return super().__call__(attn, hidden_states, encoder_hidden_states, encoder_hidden_states_mask,
                                    attention_mask, image_rotary_emb)
        seq_txt = encoder_hidden_states.shape[1]
        head_dim = attn.inner_dim // attn.heads
        img_freqs, txt_freqs = image_rotary_emb
        img_query, txt_query = attn.to_q(hidden_states), attn.add_q_proj(encoder_hidden_states)
        # The kernel reads each stream's table at its tokens' rows: both tables bounds-checked
        # against their streams (settled when compiled).
        table = torch.view_as_real(img_freqs)
        fused.check(img_query, attn.norm_q.weight, table, table, head_dim, head_dim)
        txt_table = torch.view_as_real(txt_freqs)
        fused.check(txt_query, attn.norm_added_q.weight, txt_table, txt_table, head_dim, head_dim)
        joint_query = torch.cat([norm_rope(txt_query, attn.norm_added_q, txt_freqs, head_dim),
                                 norm_rope(img_query, attn.norm_q, img_freqs, head_dim)], dim=1)
        joint_key = torch.cat([norm_rope(attn.add_k_proj(encoder_hidden_states), attn.norm_added_k, txt_freqs, head_dim),
                               norm_rope(attn.to_k(hidden_states), attn.norm_k, img_freqs, head_dim)], dim=1)
        joint_value = torch.cat([attn.add_v_proj(encoder_hidden_states), attn.to_v(hidden_states)], dim=1)
        joint_hidden_states = dispatch_attention_fn(
            joint_query.unflatten(-1, (-1, head_dim)), joint_key.unflatten(-1, (-1, head_dim)),
            joint_value.unflatten(-1, (-1, head_dim)), attn_mask=None, dropout_p=0.0, is_causal=False,
            backend=self._attention_backend, parallel_config=self._parallel_config)
        joint_hidden_states = joint_hidden_states.flatten(2, 3).to(joint_query.dtype)
        img_attn_output = attn.to_out[0](joint_hidden_states[:, seq_txt:, :].contiguous())
        if len(attn.to_out) > 1:
            img_attn_output = attn.to_out[1](img_attn_output)  # dropout
        txt_attn_output = attn.to_add_out(joint_hidden_states[:, :seq_txt, :].contiguous())
        return img_attn_output, txt_attn_output


def apply(transformer):
    """Every joint attention module of the transformer gets FusedJointAttention, every
    feed-forward's tanh GELU layer linear_gelu; returns how many of each."""
    from diffusers.models.attention_processor import Attention

    gelus = fused.fuse_gelus(transformer)
    n = 0
    for m in transformer.modules():
        if isinstance(m, Attention) and isinstance(m.processor, QwenDoubleStreamAttnProcessor2_0):
            norms = (m.norm_q, m.norm_k, m.norm_added_q, m.norm_added_k)
            if not all(isinstance(x, RMSNorm) and x.weight is not None and x.bias is None for x in norms) or \
                    len({x.eps for x in norms}) != 1:
                raise RuntimeError("fused engine: %s's q/k norms are %s, not the weighted RMSNorms of one eps it fuses" % (
                    type(m).__name__, [type(x).__name__ for x in norms]))
            fused.set_processor(m, FusedJointAttention())
            n += 1
    return {"joint attention q/k norm and RoPE": n, "feed-forward GELU": gelus}
