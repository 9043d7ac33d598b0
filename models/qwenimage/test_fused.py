"""qwenimage/fused.py on CPU tensors, its Triton kernel under Triton's interpreter: norm_rope in
Qwen's mode gives the bytes of diffusers' own q/k RMSNorm and complex RoPE, and a tiny
QwenImageTransformer2DModel with FusedJointAttention and linear_gelu gives the plain model's
output to bf16 rounding. Its speed and bytes on the GPU: scripts/gpu-runs/speed.sh qwenimage."""

import os
import sys
import unittest

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: CPU tensors, numpy semantics
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import testing  # noqa: E402


@testing.needs("torch", "diffusers", "triton")
class FusedJointAttentionTest(unittest.TestCase):
    def setUp(self):
        import torch

        from qwenimage import fused

        self.torch, self.fused = torch, fused
        torch.manual_seed(0)

    def diffusers_norm_rope(self, x, norm, freqs, head_dim):
        """What QwenDoubleStreamAttnProcessor2_0 does to a projected q or k: its RMSNorm, then
        apply_rotary_emb_qwen(use_real=False)."""
        from diffusers.models.transformers.transformer_qwenimage import apply_rotary_emb_qwen

        return apply_rotary_emb_qwen(norm(x.unflatten(-1, (-1, head_dim))), freqs, use_real=False).flatten(2)

    def test_kernel_is_the_processors_norm_and_rope(self):
        torch = self.torch
        from diffusers.models.normalization import RMSNorm
        from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

        from pyworker import fused as kernels

        head_dim = 32
        rope = QwenEmbedRope(theta=10000, axes_dim=[8, 12, 12], scale_rope=True)
        img_freqs, txt_freqs = rope([[(1, 4, 6), (1, 4, 4)]], max_txt_seq_len=7, device="cpu")  # output, reference
        for batch, heads, freqs in ((1, 3, img_freqs), (2, 2, txt_freqs)):
            norm = RMSNorm(head_dim, eps=1e-6).bfloat16()
            with torch.no_grad():
                norm.weight.copy_(1 + 0.1 * torch.randn(head_dim))
            x = (3 * torch.randn(batch, freqs.shape[0], heads * head_dim)).bfloat16()
            want = self.diffusers_norm_rope(x, norm, freqs, head_dim)
            got = self.fused.norm_rope(x, norm, freqs, head_dim)
            self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape))
            self.assertEqual(int((got != want).sum()), 0, "values differ from diffusers' at %s" % (tuple(x.shape),))
            table = torch.view_as_real(freqs)
            for gpp in (1, 2):  # heads a program: with 3 heads, 2 leaves the last program half empty
                got = kernels.norm_rope(x, norm.weight, table, table, norm.eps, head_dim, head_dim, True, gpp, 1)
                self.assertEqual(int((got != want).sum()), 0, "%d heads a program: values differ at %s" % (gpp, tuple(x.shape)))

    def test_tiny_transformer_with_the_fused_engine(self):
        torch = self.torch
        from diffusers import QwenImageTransformer2DModel

        model = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                            attention_head_dim=32, num_attention_heads=2, joint_attention_dim=24,
                                            axes_dims_rope=(8, 12, 12), zero_cond_t=True).bfloat16().eval()
        args = dict(hidden_states=torch.randn(1, 2 * 24, 16).bfloat16(), encoder_hidden_states=torch.randn(1, 7, 24).bfloat16(),
                    timestep=torch.tensor([0.5]), img_shapes=[[(1, 4, 6), (1, 4, 6)]], return_dict=False)
        from pyworker import fused as kernels

        calls = []
        kernel = kernels.norm_rope
        kernels.norm_rope = lambda *a: calls.append(a[0].shape) or kernel(*a)
        self.addCleanup(setattr, kernels, "norm_rope", kernel)
        with torch.no_grad():
            plain = model(**args)[0]
            done = self.fused.apply(model)
            processors = sorted({type(p).__name__ for p in model.attn_processors.values()})
            got = model(**args)[0]
        self.assertEqual(done, {"joint attention q/k norm and RoPE": 2, "feed-forward GELU": 4},
                         "two blocks' attention, their image and text feed-forwards")
        self.assertEqual(processors, ["FusedJointAttention"])
        self.assertEqual(calls, [(1, 7, 64), (1, 48, 64)] * 4, "q and k of text and image, in each block")
        # On a CPU linear_gelu is the plain formula and the kernel has diffusers' bytes: all equal.
        self.assertEqual(int((got != plain).sum()), 0, "the fused transformer's output differs from the plain one's")

    def test_refuses_a_rope_table_shorter_than_its_stream(self):
        """The kernel reads a stream's table at its tokens' rows: a text table of 6 rows for 7
        text tokens (or an image table of the wrong length) is refused by name, never read past."""
        torch = self.torch
        from diffusers import QwenImageTransformer2DModel
        from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

        model = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=1,
                                            attention_head_dim=32, num_attention_heads=2, joint_attention_dim=24,
                                            axes_dims_rope=(8, 12, 12)).bfloat16().eval()
        self.fused.apply(model)
        attn = model.transformer_blocks[0].attn
        rope = QwenEmbedRope(theta=10000, axes_dim=[8, 12, 12], scale_rope=True)
        img, txt = rope([[(1, 4, 6)]], max_txt_seq_len=7, device="cpu")
        hs, ehs = torch.randn(1, 24, 64).bfloat16(), torch.randn(1, 7, 64).bfloat16()
        with torch.no_grad():
            attn.processor(attn, hs, ehs, image_rotary_emb=(img, txt))  # the right lengths pass
            for tables, which in (((img, txt[:6]), r"\(6, 16, 2\) .*7 tokens x 32"), ((img[:20], txt), r"\(20, 16, 2\) .*24 tokens x 32")):
                with self.assertRaisesRegex(RuntimeError, "rotary cos " + which):
                    attn.processor(attn, hs, ehs, image_rotary_emb=tables)

    def test_refuses_norms_it_does_not_fuse(self):
        from diffusers import QwenImageTransformer2DModel

        model = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=1,
                                            attention_head_dim=32, num_attention_heads=2, joint_attention_dim=24,
                                            axes_dims_rope=(8, 12, 12))
        model.transformer_blocks[0].attn.norm_k = self.torch.nn.LayerNorm(32)
        with self.assertRaisesRegex(RuntimeError, r"q/k norms are \['RMSNorm', 'LayerNorm', 'RMSNorm', 'RMSNorm'\]"):
            self.fused.apply(model)


if __name__ == "__main__":
    unittest.main()
