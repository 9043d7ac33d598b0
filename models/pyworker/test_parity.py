"""Tests of parity.py and TorchBackend.prepare (parity before ready) on a tiny real WanPipeline on
the CPU. models/pyworker/worker_test.go runs them with the torch virtualenv `make torch` builds."""

import os
import sys
import unittest

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: the fused-scale fault's kernels on the CPU

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # models/

from pyworker import testing  # noqa: E402


class FiguresTest(unittest.TestCase):
    """The verdict's arithmetic on hand-made tensors."""

    @staticmethod
    def step(torch, cond, guided, latents=0.0, uncond=None):
        """A step's quantities, each a constant; the unconditional prediction the conditional
        one's unless given."""
        uncond = cond if uncond is None else uncond
        return {"cond": torch.ones(4) * cond, "uncond": torch.ones(4) * uncond, "guided": torch.ones(4) * guided,
                "latents": torch.ones(4) * latents}

    @testing.needs("torch")
    def test_each_quantity_has_its_own_bound(self):
        import torch

        from pyworker import parity

        run = lambda c, g, l=0.0: self.step(torch, c, g, l)  # noqa: E731
        ref, fp32 = run(1.0, 1.0, 0.0), run(1.01, 1.05, 0.01)  # eager is 1 % (cond) and 5 % (guided) off fp32
        ok = parity.figures(ref, run(1.005, 1.02, 0.0), fp32, "engine x, layout single")
        self.assertTrue(ok["passed"], ok)
        self.assertAlmostEqual(ok["cond_bound"], 2 * ok["cond_fp32_reference"])
        self.assertAlmostEqual(ok["uncond_bound"], 2 * ok["uncond_fp32_reference"])
        self.assertAlmostEqual(ok["bound"], 2 * ok["fp32_reference"])
        self.assertAlmostEqual(ok["max_abs_bound"], 4 * 0.01)
        # 3 % off fp32 on the conditional prediction: inside the guided bound (10 %), outside its own (2 %).
        cond = parity.figures(ref, self.step(torch, 1.04, 1.05, 0.01, uncond=1.005), fp32, "engine x, layout single")
        self.assertFalse(cond["passed"], cond)
        self.assertEqual(len(cond["failed"]), 1, cond)
        self.assertIn("cond prediction", cond["failed"][0])
        # A guidance branch duplicated: the conditional prediction exact, the guided one far.
        guided = parity.figures(ref, run(1.0, 1.3, 0.01), fp32, "engine x, layout single")
        self.assertEqual([f.split(" ")[1] for f in guided["failed"]], ["guided"], guided)
        # The same where the pipeline takes it out of the guided prediction (Qwen-Image-Edit's
        # rescale): the unconditional prediction has its own bound, and sees it alone.
        uncond = parity.figures(ref, self.step(torch, 1.0, 1.05, 0.01, uncond=1.06), fp32, "engine x, layout single")
        self.assertEqual([f.split(" ")[1] for f in uncond["failed"]], ["uncond"], uncond)
        self.assertAlmostEqual(uncond["uncond_rel_l2"], 0.06, places=6)
        # The latents far off in one place: neither prediction over its bound, the max abs is.
        spike = run(1.0, 1.0, 0.0)
        spike["latents"][0] = 0.5
        lat = parity.figures(ref, spike, fp32, "engine x, layout single")
        self.assertEqual(len(lat["failed"]), 1, lat)
        self.assertIn("latents", lat["failed"][0])
        with self.assertRaisesRegex(parity.ParityError, r"engine regional-compile-fused, layout ulysses-2 differs .*cond prediction is 0\.0297"):
            parity.verdict(cond, "regional-compile-fused", "ulysses-2")
        parity.verdict(ok, "eager", None)  # passes: no exception

    @testing.needs("torch")
    def test_nan_and_a_broken_reference_never_pass(self):
        import math

        import torch

        from pyworker import parity

        run = lambda c, g, l=0.0: self.step(torch, c, g, l)  # noqa: E731
        ref, fp32 = run(1.0, 1.0), run(1.01, 1.05, 0.01)
        for q in ("cond", "uncond", "guided", "latents"):
            nan = run(1.0, 1.0)
            nan[q][1] = math.nan
            self.assertFalse(parity.figures(ref, nan, fp32, "x")["passed"], "NaN in %s never passes" % q)
        # fp32 that returns finite garbage: every floor is wide, so is every bound, but the floor
        # is over its ceiling: refused, whatever the served runtime computes.
        garbage = run(3.0, 3.0, 2.0)
        f = parity.figures(ref, run(2.0, 2.0, 1.0), garbage, "x")
        self.assertFalse(f["passed"], f)
        self.assertEqual([m.split(" ")[1] for m in f["failed"]], ["guided", "cond", "uncond"], f)
        self.assertIn("over its ceiling 0.06: the fp32 reference is broken", f["failed"][1])
        self.assertFalse(parity.figures(ref, None, garbage)["passed"], "eager's own floor is held to the ceiling too")

    @testing.needs("torch")
    def test_a_step_of_one_call_has_no_unconditional_prediction(self):
        """A guidance-distilled pipeline (MiniMax-H3) calls the transformer once a step: its
        unconditional figures are null and it passes on the rest; a served step that lost the
        second call eager made is refused."""
        import torch

        from pyworker import parity

        run = lambda c, g, l=0.0: self.step(torch, c, g, l)  # noqa: E731
        one = lambda c, g, l=0.0: dict(run(c, g, l), uncond=None)  # noqa: E731
        f = parity.figures(one(1.0, 1.0), one(1.005, 1.005), one(1.01, 1.01, 0.01), "engine x, layout single")
        self.assertTrue(f["passed"], f)
        for k in ("rel_l2", "fp32_reference", "fp32_served", "bound", "ceiling"):
            self.assertIsNone(f["uncond_" + k], k)
        self.assertIn("uncond null (null) bound null", parity.summary(f))
        lost = parity.figures(run(1.0, 1.0), one(1.0, 1.0), run(1.01, 1.05, 0.01), "engine x, layout single")
        self.assertEqual(lost["failed"], ["its step made one transformer call where eager's made two: no uncond prediction to hold"])

    @testing.needs("torch")
    def test_eager_on_one_device_is_the_reference(self):
        import torch

        from pyworker import parity

        ref, fp32 = self.step(torch, 1.0, 1.0), self.step(torch, 1.01, 1.05, 0.01)
        f = parity.figures(ref, None, fp32)
        self.assertTrue(f["passed"], f)
        self.assertEqual(f["served"], "is the reference")
        self.assertIsNone(f["rel_l2"])
        self.assertIsNone(f["cond_rel_l2"])
        self.assertIsNone(f["uncond_rel_l2"])
        self.assertIsNone(f["max_abs"])
        self.assertEqual(f["cond_fp32_served"], f["cond_fp32_reference"])
        self.assertEqual(f["uncond_fp32_served"], f["uncond_fp32_reference"])
        self.assertIn("served is the reference", parity.summary(f))


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
            fused_module = "wan.fused"
            rope = ("rope", 1)

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

    def prepare(self, scale, engine=None):
        b = self.Tiny(scale)
        self.addCleanup(lambda: b.undo_fault and b.undo_fault())
        b.prepare(b.pipe, None, engine or "scaled-%g" % scale, 0)
        return b

    def test_the_same_arithmetic_is_ready_with_its_figures(self):
        b = self.prepare(1.0)
        p = b.parity
        self.assertTrue(p["passed"], p)
        self.assertEqual((p["rel_l2"], p["cond_rel_l2"], p["uncond_rel_l2"], p["max_abs"]), (0.0, 0.0, 0.0, 0.0),
                         "eager's arithmetic, run again: bit for bit")
        for q in ("", "cond_", "uncond_", "max_abs_"):
            floor = p[q + "fp32_reference"]
            self.assertGreater(floor, 0.0, q)
            self.assertEqual(p[q + "fp32_served"], floor, q)
        self.assertLess(p["cond_fp32_reference"], p["fp32_reference"], "the unguided prediction has the smaller floor")
        self.assertLess(p["uncond_fp32_reference"], p["fp32_reference"], "so has the other unguided one")
        self.assertNotEqual(p["uncond_fp32_reference"], p["cond_fp32_reference"], "the second call, not the first again")
        self.assertIn("parity: against eager: cond 0, uncond 0, guided 0, latents max abs 0", "\n".join(self.logs))
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

    def test_eager_on_one_device_is_the_reference(self):
        b = self.prepare(1.0, "eager")
        self.assertEqual(b.parity["served"], "is the reference")
        self.assertIsNone(b.parity["rel_l2"])
        self.assertNotIn("served (engine", "\n".join(self.logs), "no served step")

    def test_the_fp32_floor_holds_one_block_in_fp32_and_leaves_the_weights_as_they_were(self):
        """Block by block: inside each block's forward that block is fp32 and every other block
        bf16, so the extra memory is one block's; after, every weight bit for bit."""
        torch = self.torch
        b = self.Tiny(1.0)
        model = b.pipe.transformer
        before = {n: t.clone() for n, t in model.state_dict().items()}
        seen = []

        def look(block, args):
            seen.append([{p.dtype for p in other.parameters()} for other in model.blocks])

        with self.parity.FP32(model, torch):
            hooks = [blk.register_forward_pre_hook(look) for blk in model.blocks]  # after FP32's own
            self.assertEqual({p.dtype for p in model.blocks.parameters()}, {torch.bfloat16}, "blocks wait in bf16")
            self.assertEqual({p.dtype for p in model.proj_out.parameters()}, {torch.float32}, "the rest is fp32")
            with torch.inference_mode():
                b.pipe(**b.warmup_kwargs(1))
        for h in hooks:
            h.remove()
        self.assertEqual(len(seen), 2 * len(model.blocks), "two branches, every block")
        for i, dtypes in enumerate(seen):
            k = i % len(model.blocks)
            self.assertEqual(dtypes, [{torch.float32} if j == k else {torch.bfloat16} for j in range(len(model.blocks))])
        after = model.state_dict()
        for n, t in before.items():
            self.assertEqual(after[n].dtype, t.dtype, n)
            self.assertTrue(torch.equal(after[n], t), n)
        self.assertNotIn("forward", vars(b.pipe.transformer), "the upcasting forward is gone")

    def test_a_runtime_a_few_percent_off_is_refused_by_name(self):
        with self.assertRaisesRegex(self.parity.ParityError,
                                    r"engine scaled-1.1, layout single differs from eager on one device: its guided prediction .* from fp32"):
            self.prepare(1.1)

    def test_nan_is_refused(self):
        with self.assertRaisesRegex(self.parity.ParityError, r"engine scaled-nan, layout single .*cond nan, uncond nan, guided nan"):
            self.prepare(float("nan"))

    def test_every_fault_is_refused_with_its_figures(self):
        """Each wrong runtime of faults.py, injected at load by MEDIAQUAL_PARITY_FAULT on the eager
        engine, is refused by prepare, naming it; the conditional prediction sees every one but
        the guidance branches' (which leave it exact), the unconditional one sees those."""
        from pyworker import faults

        for name in faults.FAULTS:
            with self.subTest(fault=name):
                os.environ[faults.ENV] = name
                self.addCleanup(os.environ.pop, faults.ENV, None)
                with self.assertRaisesRegex(self.parity.ParityError, r"engine eager, layout single \(fault %s\)" % name) as e:
                    self.prepare(1.0, "eager")
                self.assertIn("over the bound", str(e.exception))
                if name.startswith("branch-"):
                    self.assertRegex(str(e.exception), r"against eager: cond 0, uncond (?!0[,;])")
                    self.assertIn("its uncond prediction", str(e.exception))
                else:
                    self.assertIn("its cond prediction", str(e.exception))
        os.environ[faults.ENV] = "no-such-fault"
        with self.assertRaisesRegex(RuntimeError, "MEDIAQUAL_PARITY_FAULT='no-such-fault' is not a fault; faults: attention-half"):
            self.prepare(1.0, "eager")


if __name__ == "__main__":
    unittest.main()
