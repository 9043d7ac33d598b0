"""Tests of parity.py and TorchBackend.prepare (parity before ready) on a tiny real WanPipeline on
the CPU. models/pyworker/worker_test.go runs them with the torch virtualenv `make torch` builds."""

import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # models/

from pyworker import testing  # noqa: E402


class FiguresTest(unittest.TestCase):
    """The verdict's arithmetic on hand-made tensors."""

    @testing.needs("torch")
    def test_bound_nan_and_message(self):
        import torch

        from pyworker import parity

        ref = (torch.ones(4), torch.zeros(4))
        fp32 = (torch.ones(4) * 1.01, torch.zeros(4))  # the reference is 1 % off fp32
        near = (torch.ones(4) * 1.005, torch.zeros(4))  # 0.5 % off fp32: inside 2 x 1 %
        far = (torch.ones(4) * 1.5, torch.ones(4))
        nan = (torch.full((4,), math.nan), torch.zeros(4))
        self.assertTrue(parity.figures(ref, near, fp32)["passed"])
        f = parity.figures(ref, far, fp32)
        self.assertFalse(f["passed"], f)
        self.assertAlmostEqual(f["bound"], 2 * f["fp32_reference"])
        self.assertFalse(parity.figures(ref, nan, fp32)["passed"], "NaN never passes")
        self.assertFalse(parity.figures(ref, nan, None, "no room")["passed"], "NaN never passes without a floor")
        without = parity.figures(ref, near, None, "the fp32 transformer needs 75 GiB more, 40 GiB free")
        self.assertTrue(without["passed"], without)
        self.assertIsNone(without["fp32_served"])
        self.assertIn("75 GiB", without["bound_of"])
        self.assertFalse(parity.figures(ref, (torch.ones(4) * 1.06, torch.zeros(4)), None, "x")["passed"],
                         "6 % off eager is outside the no-floor bound")
        with self.assertRaisesRegex(parity.ParityError, r"engine regional-compile-fused, layout ulysses-2 .*rel_l2 0\.5"):
            parity.verdict(f, "regional-compile-fused", "ulysses-2")
        parity.verdict(parity.figures(ref, near, fp32), "eager", None)  # passes: no exception

    def test_fp32_fits_keeps_the_margin_and_says_it(self):
        """MiniMax-H3 on the H200: 61.7 GiB more needed, 71.1 free, refused for the margin."""
        from pyworker import parity

        class Device:
            def __init__(self, kind):
                self.type = kind.split(":")[0]

        class Tensor:
            dtype, device = "bf16", Device("cuda:0")

            def numel(self):
                return 40 * 2**30 // 2  # 40 GiB in bf16: 40 GiB more in fp32

        class Transformer:
            def parameters(self):
                return [Tensor()]

            def buffers(self):
                return []

        class Torch:
            bfloat16, float16, device = "bf16", "f16", Device

            class cuda:
                free = 0

                @classmethod
                def mem_get_info(cls, device):
                    return cls.free, 0

                memory_reserved = memory_allocated = staticmethod(lambda device: 0)

        Torch.cuda.free = 45 * 2**30  # 40 x 1.25 = 50 > 45: no
        self.assertEqual(parity.fp32_fits(Transformer(), "cuda:0", Torch),
                         (False, "the fp32 transformer needs 40.0 GiB more (50.0 with the 1.25x margin for the step), 45.0 GiB free"))
        Torch.cuda.free = 51 * 2**30
        self.assertEqual(parity.fp32_fits(Transformer(), "cuda:0", Torch), (True, ""))


@testing.needs("torch", "diffusers", "transformers")
class PrepareTest(unittest.TestCase):
    """TorchBackend.prepare on a tiny bf16 WanPipeline: an engine that computes the same thing
    is ready with its figures; one that is a few percent off, or NaN, is refused by name."""

    def setUp(self):
        import torch

        sys.path.insert(0, os.path.join(HERE, "testdata"))
        import tiny_wan_parallel as tiny
        from pyworker import parity
        from pyworker import worker as pw

        self.torch, self.parity = torch, parity
        logs = self.logs = []

        class Tiny(pw.TorchBackend):
            log = staticmethod(logs.append)
            both_branches = staticmethod(lambda kwargs: True)

            def __init__(self, scale):
                self.setup("cpu")
                self.pipe = tiny.pipeline(bf16=True)
                self.scale = scale

            def warmup_kwargs(self, steps):
                return dict(tiny.call_kwargs(tiny.SHAPE), num_inference_steps=steps)

            def apply_engine(self, pipe, engine):
                """An "engine" scaling the transformer's output by scale: 1 is eager itself."""
                forward = pipe.transformer.forward
                scale = self.scale
                pipe.transformer.forward = lambda *a, **k: tuple(o * scale for o in forward(*a, **k))
                self.engine = engine

        self.Tiny = Tiny

    def prepare(self, scale):
        b = self.Tiny(scale)
        b.prepare(b.pipe, None, "scaled-%g" % scale, 0)
        return b

    def test_the_same_arithmetic_is_ready_with_its_figures(self):
        b = self.prepare(1.0)
        p = b.parity
        self.assertTrue(p["passed"], p)
        self.assertEqual((p["rel_l2"], p["max_abs"]), (0.0, 0.0), "eager against itself: bit for bit")
        floor = p["fp32_reference"]
        self.assertGreater(floor, 0.0)
        self.assertEqual(p["fp32_served"], floor)
        self.assertIn("parity: rel_l2 0, max_abs 0 against eager", "\n".join(self.logs))
        b.l0_random = True
        self.assertEqual(b.ready_info()["parity"], p, "ready carries the figures")

    def test_a_compiled_engine_runs_other_shapes_eagerly(self):
        """regional-compile, warmed at the pinned shape: parity passes, and afterwards a shape
        the warm-up did not compile runs eagerly (no new graph, eager's bytes exactly) while the
        pinned shape keeps its compiled bytes. Without keep_compiled_shapes dynamo compiles a
        new (dynamic) graph for the other shape, which can then serve the pinned one too."""
        torch = self.torch
        import sys

        from torch._dynamo.utils import counters

        tiny = sys.modules["tiny_wan_parallel"]
        b = self.Tiny(1.0)
        del self.Tiny.apply_engine  # the real engine for this test: compile_repeated_blocks
        self.addCleanup(torch.compiler.set_stance, "default")
        b.prepare(b.pipe, None, "regional-compile", 2)
        self.assertTrue(b.parity["passed"], b.parity)
        pinned = lambda: tiny.call_kwargs(tiny.SHAPE)  # noqa: E731 (fresh kwargs: each has its seeded generator)
        other = lambda: tiny.call_kwargs({"height": 48, "width": 32, "num_frames": 5})  # noqa: E731
        with torch.inference_mode():
            first = b.pipe(**pinned()).frames[0]
            graphs = counters["stats"]["unique_graphs"]
            got = b.pipe(**other()).frames[0]
            self.assertEqual(counters["stats"]["unique_graphs"], graphs, "nothing compiled for the other shape")
            again = b.pipe(**pinned()).frames[0]
            with torch.compiler.set_stance("force_eager"):
                eager = b.pipe(**other()).frames[0]
                self.assertFalse(torch.equal(first, b.pipe(**pinned()).frames[0]),
                                 "the pinned shape runs compiled (other bytes than eager's)")
        self.assertTrue(torch.equal(first, again), "the pinned shape's bytes after another shape")
        self.assertTrue(torch.equal(got, eager), "the other shape ran eagerly")

    def test_the_fp32_floor_leaves_the_weights_as_they_were(self):
        torch = self.torch
        b = self.Tiny(1.0)
        before = {n: t.clone() for n, t in b.pipe.transformer.state_dict().items()}
        with self.parity.FP32(b.pipe.transformer, torch):
            self.assertEqual({t.dtype for t in b.pipe.transformer.parameters()}, {torch.float32})
        after = b.pipe.transformer.state_dict()
        for n, t in before.items():
            self.assertEqual(after[n].dtype, t.dtype, n)
            self.assertTrue(torch.equal(after[n], t), n)
        self.assertNotIn("forward", vars(b.pipe.transformer), "the upcasting forward is gone")

    def test_a_runtime_a_few_percent_off_is_refused_by_name(self):
        with self.assertRaisesRegex(self.parity.ParityError,
                                    r"engine scaled-1.1, layout single differs from eager on one device: .* from fp32"):
            self.prepare(1.1)

    def test_nan_is_refused(self):
        with self.assertRaisesRegex(self.parity.ParityError, r"engine scaled-nan, layout single .*rel_l2 nan"):
            self.prepare(float("nan"))


if __name__ == "__main__":
    unittest.main()
