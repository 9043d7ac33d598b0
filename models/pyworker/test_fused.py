"""pyworker/fused.py on CPU tensors, its Triton kernel under Triton's interpreter: norm_rope's
argument check names what is wrong; linear_gelu is the biased tanh GELU of the matmul and
verify_gelu tells it from the erf GELU; fuse_gelus refuses GELU layers it cannot fuse. The
kernel's bytes in each family's mode: models/wan/test_adapter.py (FusedKernelTest) and
models/qwenimage/test_fused.py."""

import os
import sys
import unittest

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: CPU tensors, numpy semantics
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import testing  # noqa: E402


@testing.needs("torch", "diffusers", "triton")
class FusedKernelsTest(unittest.TestCase):
    def setUp(self):
        import torch

        from pyworker import fused

        self.torch, self.fused = torch, fused
        torch.manual_seed(0)

    def test_check_names_what_is_wrong(self):
        torch, fused = self.torch, self.fused
        x = torch.randn(1, 48, 64).bfloat16()
        w = torch.ones(64).bfloat16()
        table = torch.randn(1, 48, 1, 32)
        fused.check(x, w, table, table, 32, 64)  # what Wan passes
        fused.check(x, w[:32], table, table, 32, 32)  # what Qwen passes
        cases = [
            ((x.half(), w, table, table, 32, 64), "x (1, 48, 64) torch.float16 contiguous=True (want 3-d contiguous bf16)"),
            ((x.transpose(1, 2), w, table, table, 32, 64), "contiguous=False"),
            ((x, w, table, table, 32, 48), "a row of 64 in norm groups of 48 with heads of 32"),
            ((x, w, table, table, 32, 32), "norm weight (64,) for groups of 32"),
            ((x, w, table, table[:, :3], 32, 64), "rotary sin (1, 3, 1, 32) torch.float32 (want contiguous fp32 or bf16, 48 tokens x 32)"),
            ((x, w, table.half(), table, 32, 64), "rotary cos (1, 48, 1, 32) torch.float16"),
        ]
        for args, want in cases:
            with self.assertRaises(RuntimeError) as e:
                fused.check(*args)
            self.assertIn(want, str(e.exception))

    def test_linear_gelu_is_the_tanh_gelu_of_the_matmul(self):
        torch, fused = self.torch, self.fused
        x = torch.randn(2, 5, 32)  # fp32: tanh against erf GELU is below bf16's rounding
        lin = torch.nn.Linear(32, 48)
        with torch.no_grad():
            want = torch.nn.functional.gelu(lin(x), approximate="tanh")
            got = fused.linear_gelu(x, lin.weight, lin.bias)
        self.assertEqual(got.shape, want.shape)
        self.assertLess(float((got - want).norm() / want.norm()), 1e-6)
        self.assertLess(fused.verify_gelu("cpu"), 1e-6)

    def test_verify_gelu_refuses_the_erf_gelu(self):
        """What a CPU's _addmm_activation (and any epilogue other than tanh) would give."""
        torch, fused = self.torch, self.fused
        tanh = fused.linear_gelu
        fused.linear_gelu = lambda x, w, b: torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))
        self.addCleanup(setattr, fused, "linear_gelu", tanh)
        with self.assertRaisesRegex(RuntimeError, "linear_gelu on cpu is not the tanh GELU"):
            fused.verify_gelu("cpu")

    def test_fuse_gelus_takes_only_the_biased_tanh_gelu(self):
        from diffusers.models.activations import GELU

        fused = self.fused
        model = self.torch.nn.Sequential(GELU(8, 16, approximate="tanh"), GELU(16, 8, approximate="tanh"))
        self.assertEqual(fused.fuse_gelus(model), 2)
        for layer, why in ((GELU(8, 16), "approximate='none', bias True"), (GELU(8, 16, approximate="tanh", bias=False),
                                                                            "approximate='tanh', bias False")):
            with self.assertRaisesRegex(RuntimeError, "a GELU layer with " + why):
                fused.fuse_gelus(self.torch.nn.Sequential(layer))


if __name__ == "__main__":
    unittest.main()
