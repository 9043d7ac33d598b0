"""Tests of the shared worker machinery (worker.py); those that need torch, numpy, Pillow or
diffusers are not run without them. models/pyworker/worker_test.go runs them under `go test
./...` twice: with the plain python3 (the pure paths) and with the torch environment (all)."""

import gc
import os
import re
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import l0  # noqa: E402
from pyworker import ranks  # noqa: E402
from pyworker import testing  # noqa: E402
from pyworker import worker as pw  # noqa: E402

class Rgb24Test(unittest.TestCase):
    def test_quantize(self):
        q = pw.quantize
        self.assertEqual([q(0.0), q(1.0), q(-0.5), q(1.5), q(0.5), q(1 / 255), q(254.5 / 255)],
                         [0, 255, 0, 255, 128, 1, 254])  # 127.5 and 254.5 round half to even
        for bad in (float("nan"), float("inf"), float("-inf")):
            with self.assertRaises(pw.JobError) as cm:
                q(bad)
            self.assertEqual(cm.exception.code, "non_finite_output")

    def test_layout(self):
        # 2 frames, 2 rows, 3 columns: row-major, frame after frame, R G B.
        video = [[[[f, y / 2, x / 4] for x in range(3)] for y in range(2)] for f in (0.0, 1.0)]
        self.assertEqual(pw.video_shape(video), (2, 2, 3, 3))
        data = pw.rgb24(video)
        self.assertEqual(len(data), 2 * 2 * 3 * 3)
        self.assertEqual(list(data[:9]), [0, 0, 0, 0, 0, 64, 0, 0, 128])
        self.assertEqual(list(data[9:12]), [0, 128, 0])
        self.assertEqual(list(data[18:21]), [255, 0, 0])

    def test_bad_shapes(self):
        for v in ([[[[0, 0]]]], [[[0, 0, 0]]], []):
            with self.assertRaises(pw.JobError):
                pw.rgb24(v)

    @testing.needs("numpy")
    def test_numpy_path_matches_the_pure_path(self):
        import numpy as np

        rng = np.random.default_rng(1)
        arr = rng.uniform(-0.2, 1.2, size=(3, 4, 5, 3)).astype(np.float32)
        arr[0, 0, 0] = [0.5, 1 / 255, 254.5 / 255]
        self.assertEqual(bytes(pw.rgb24(arr)), pw.rgb24(arr.astype(np.float64).tolist()))
        arr[1, 1, 1, 1] = np.nan
        with self.assertRaises(pw.JobError):
            pw.rgb24(arr)


class WeightsTest(unittest.TestCase):
    def test_l0_marker_is_noted_and_reported(self):
        b = pw.TorchBackend()
        with tempfile.TemporaryDirectory() as bundle:
            self.assertEqual(b.note_weights(bundle), "")
            self.assertEqual(b.ready_info(), {"weights": "bundle"})
            open(os.path.join(bundle, l0.MARKER), "w").close()
            self.assertIn("L0-RANDOM", b.note_weights(bundle))
            self.assertEqual(b.ready_info(), {"weights": "L0-random"})
            b.apply_engine(CompilablePipe(), "eager")
            self.assertEqual(b.ready_info(), {"weights": "L0-random", "engine": "eager"})


class ReferenceTest(unittest.TestCase):
    def test_the_run_op_names_the_upload(self):
        self.assertIsNone(pw.reference_of({}))
        self.assertEqual(pw.reference_of({"reference": "/s/ref"}), "/s/ref")
        for bad in ({"reference": 7}, {"reference": ""}):
            with self.subTest(op=bad), self.assertRaises(pw.JobError) as cm:
                pw.reference_of(bad)
            self.assertEqual(cm.exception.code, "invalid_request")

    @testing.needs("PIL")
    def test_an_upload_is_decoded_by_its_content(self):
        from PIL import Image

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ref")  # no extension: the bytes say what it is
            Image.frombytes("RGB", (3, 2), bytes(range(18))).save(path, format="PNG")
            im = pw.open_reference(path)
            self.assertEqual((im.mode, im.size, im.tobytes()), ("RGB", (3, 2), bytes(range(18))))
            Image.frombytes("RGBA", (3, 2), bytes(range(24))).save(path, format="PNG")
            im = pw.open_reference(path)  # alpha dropped, as convert("RGB") drops it
            self.assertEqual((im.mode, im.tobytes()), ("RGB", bytes(b for i, b in enumerate(range(24)) if i % 4 != 3)))
            with open(path, "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n not really")
            with self.assertRaises(OSError):
                pw.open_reference(path)


class CompilablePipe:
    """A pipeline whose transformer records how it was asked to compile."""

    class Transformer:
        compiled = None

        def compile_repeated_blocks(self, **kw):
            self.compiled = kw

        def forward(self, **kw):
            return ("plain", kw)

    def __init__(self):
        self.transformer = self.Transformer()


class EngineTest(unittest.TestCase):
    def test_engines(self):
        b, pipe = pw.TorchBackend(), CompilablePipe()
        b.apply_engine(pipe, "eager")
        self.assertIsNone(pipe.transformer.compiled)
        with self.assertRaisesRegex(RuntimeError, "engine 'max' is not one of eager, regional-compile, regional-compile-graphs, "
                                                  "regional-compile-fused, regional-compile-fused-graphs"):
            b.apply_engine(pipe, "max")
        for engine in ("regional-compile-fused", "regional-compile-fused-graphs"):
            with self.assertRaisesRegex(RuntimeError, "engine %s is not offered: this family has no fused kernels; "
                                                      "offered: eager, regional-compile, regional-compile-graphs$" % engine):
                b.apply_engine(pipe, engine)
        self.assertIsNone(pipe.transformer.compiled, "nothing compiled for an engine the family lacks")

        class NoGraphs(pw.TorchBackend):
            fused_module = "some.fused"
            no_graphs = "its forward copies from the host"

        for engine in ("regional-compile-graphs", "regional-compile-fused-graphs"):
            with self.assertRaisesRegex(RuntimeError, "engine %s is not offered: its forward copies from the host; "
                                                      "offered: eager, regional-compile, regional-compile-fused$" % engine):
                NoGraphs().apply_engine(pipe, engine)
        self.assertIsNone(pipe.transformer.compiled)

    @testing.needs("torch")
    def test_regional_compile_is_deterministic_inductor(self):
        import torch._inductor.config as inductor

        self.assertTrue(hasattr(inductor, "deterministic"), "the option apply_engine passes exists in this torch")
        b, pipe = pw.TorchBackend(), CompilablePipe()
        b.apply_engine(pipe, "regional-compile")
        self.assertEqual(pipe.transformer.compiled, {"fullgraph": True, "options": {"deterministic": True}})
        self.assertEqual(b.engine, "regional-compile")

    @testing.needs("torch", "diffusers")
    def test_every_compile_of_a_block_is_deterministic(self):
        """The real thing on the CPU: a diffusers model's repeated block compiled as
        apply_engine compiles it, then called at two sequence lengths (a static compile, then
        dynamo's dynamic recompile, as Qwen's prompt and negative prompt make). Inductor's
        deterministic mode is on in both; set globally instead, it was off in the second.
        The flag is read where inductor generates the block's code (GraphLowering.codegen),
        and each compile is stopped there: what the generated C++ would compute is not the
        question, and g++ (most of the test's time) never runs."""
        import unittest.mock

        import sympy
        import torch
        import torch._inductor.config as inductor
        import torch._inductor.graph as graph
        from diffusers.models.modeling_utils import ModelMixin

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin, self.norm = torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)

            def forward(self, x):
                return self.norm(torch.relu(self.lin(x)) + x)

        class Tiny(ModelMixin):
            _repeated_blocks = ["Block"]

            def __init__(self):
                super().__init__()
                self.blocks = torch.nn.ModuleList([Block(), Block()])

            def forward(self, x):
                for blk in self.blocks:
                    x = blk(x)
                return x

        class Pipe:
            transformer = Tiny()

        class CodegenReached(Exception):
            pass

        seen, codegen = [], graph.GraphLowering.codegen

        def recording(self, *a, **kw):
            dynamic = any(not isinstance(s, (int, sympy.Integer))
                          for v in self.graph_inputs.values() if hasattr(v, "get_size") for s in v.get_size())
            seen.append((inductor.deterministic, "dynamic" if dynamic else "static"))
            raise CodegenReached()

        torch._dynamo.reset()
        graph.GraphLowering.codegen = recording
        try:
            pw.TorchBackend().apply_engine(Pipe, "regional-compile")
            # Compiled, not loaded from inductor's on-disk cache, so that codegen runs; the
            # fresh cache directory it then makes (and keeps, on error) is a temporary one.
            with tempfile.TemporaryDirectory() as cache, unittest.mock.patch.dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache), \
                    torch.inference_mode(), inductor.patch(force_disable_caches=True):
                for n in (5, 7):
                    with self.assertRaises(Exception) as stopped:
                        Pipe.transformer(torch.randn(1, n, 8))
                    chain, e = [], stopped.exception
                    while e is not None:
                        chain.append(e)
                        e = e.__cause__ or e.__context__
                    self.assertTrue(any(isinstance(e, CodegenReached) for e in chain),
                                    "the compile at %d stopped at codegen, not on an error of its own: %r" % (n, chain))
        finally:
            graph.GraphLowering.codegen = codegen
            torch._dynamo.reset()
        self.assertEqual(seen, [(True, "static"), (True, "dynamic")], "inductor's deterministic flag at each compile of the block")

    @testing.needs("torch")
    def test_regional_compile_graphs_graphs_the_transformer_inside_a_layout(self):
        import torch

        from pyworker.graphs import GraphedForward

        b, pipe = pw.TorchBackend(), CompilablePipe()
        b.torch = torch
        b.apply_engine(pipe, "regional-compile-graphs")
        self.assertEqual(pipe.transformer.compiled, {"fullgraph": True, "options": {"deterministic": True}})
        self.assertIsInstance(pipe.transformer.forward, GraphedForward)
        # No CUDA tensor in the call: the plain forward, counted as such.
        self.assertEqual(pipe.transformer.forward(hidden_states=torch.zeros(1), return_dict=False)[0], "plain")
        self.assertEqual(b.cuda_graphs.report(), "graphs: 0 recorded, 0 replays, 1 plain calls")

        class Layout:  # a layout's Branches: it calls the transformer through _forward
            _forward = pipe.transformer.forward

        b2, pipe2 = pw.TorchBackend(), CompilablePipe()
        b2.torch, b2.cfg_parallel = torch, Layout()
        b2.apply_engine(pipe2, "regional-compile-graphs")
        self.assertIsInstance(b2.cfg_parallel._forward, GraphedForward)
        self.assertNotIsInstance(pipe2.transformer.forward, GraphedForward)


class PhasesTest(unittest.TestCase):
    def test_split(self):
        # Two prompt encodings (true CFG), then the decode; the call ran from 0 to 10 s.
        marks = [("encode_prompt", 0.1, 0.3), ("encode_prompt", 0.3, 0.4), ("decode", 9.0, 9.6)]
        self.assertEqual(pw.phases_ms(marks, 0.0, 10.0),
                         {"encode_prompt": 300.0, "denoise": 8600.0, "decode": 1000.0})

    def test_split_with_the_references_encode(self):
        # An edit: the reference's VAE encode between the prompts and the steps is its own phase.
        marks = [("encode_prompt", 0.1, 0.3), ("encode_image", 0.5, 0.7), ("decode", 9.0, 9.6)]
        self.assertEqual(pw.phases_ms(marks, 0.0, 10.0),
                         {"encode_prompt": 200.0, "encode_image": 200.0, "denoise": 8500.0, "decode": 1000.0})

    def test_nothing_claimed_without_both_marks(self):
        self.assertEqual(pw.phases_ms([("encode_prompt", 0.1, 0.3)], 0.0, 1.0), {})
        self.assertEqual(pw.phases_ms([("decode", 0.1, 0.3)], 0.0, 1.0), {})

    def test_instrument_times_the_calls(self):
        class VAE:
            def decode(self, x):
                return x * 2

            def encode(self, x):
                return x / 2

        class Pipe:
            vae = VAE()

            def encode_prompt(self, p):
                return p + "!"

        b, pipe = pw.TorchBackend(), Pipe()
        b.cuda = False
        b.instrument(pipe)
        self.assertEqual(pipe.encode_prompt("a"), "a!")
        self.assertEqual(pipe.vae.decode(2), 4)
        self.assertEqual(pipe.vae.encode(2), 1)
        self.assertEqual([m[0] for m in b.marks], ["encode_prompt", "decode", "encode_image"])
        self.assertTrue(all(a <= z for _, a, z in b.marks))


class LayoutTest(unittest.TestCase):
    def test_layouts_parse_as_spec_layout_does(self):
        for layout, want in ((None, ("single", 1)), ("single", ("single", 1)), ("cfg-2", ("cfg", 2)),
                             ("ulysses-2", ("ulysses", 2)), ("ulysses-8", ("ulysses", 8))):
            self.assertEqual(ranks.parse_layout(layout), want, layout)
        for bad in ("", "cfg-4", "cfg-1", "ulysses-1", "ulysses-", "ring-2", "ulysses-2x", "ulysses-\u0662", "2"):
            with self.assertRaises(ValueError, msg=bad) as cm:
                ranks.parse_layout(bad)
            self.assertIn(repr(bad), str(cm.exception))

    def test_each_rank_takes_its_own_gpu(self):
        self.assertEqual(ranks.rank_device("cuda:0", "cfg-2", {ranks.RANK_ENV: "1"}), "cuda:1")
        self.assertEqual(ranks.rank_device("cuda:0", "ulysses-4", {}), "cuda:0")
        self.assertEqual(ranks.rank_device("cuda:0", "single", {ranks.RANK_ENV: "1"}), "cuda:0")
        self.assertEqual(ranks.rank_device("cpu", "cfg-2", {ranks.RANK_ENV: "1"}), "cpu")
        with self.assertRaises(ValueError):
            ranks.rank_device("cuda:0", "cfg-2", {ranks.RANK_ENV: "one"})

    def test_a_bad_layout_flag_is_an_argparse_error(self):
        import argparse

        self.assertEqual(pw.layout_arg("cfg-2"), "cfg-2")
        with self.assertRaises(argparse.ArgumentTypeError):
            pw.layout_arg("cfg-3")


class CollectingFamily:
    """A family whose one-pixel Task runs a full garbage collection."""

    precision = "fp32"

    def load(self):
        pass

    def run(self, settings, reference, progress, cancelled):
        gc.collect()
        return pw.Output([[[[0.5, 0.5, 0.5]]]], {"width": 1, "height": 1}, 1.0, 0.0, {})


class PausesTest(unittest.TestCase):
    def test_collections_are_counted_and_reset(self):
        p = pw.Pauses()
        self.addCleanup(p.close)
        gc.disable()
        self.addCleanup(gc.enable)
        p.take()
        gc.collect()
        n, full, ms = p.take()
        self.assertEqual((n, full), (1, 1))
        self.assertGreater(ms, 0.0)
        self.assertEqual(p.take(), (0, 0, 0.0))

    def test_settle_freezes_the_loaded_heap(self):
        self.addCleanup(gc.unfreeze)
        pw.settle_heap()
        self.assertGreater(gc.get_freeze_count(), 0)

    def test_a_jobs_full_collection_is_logged(self):
        logs, inp, out = [], testing.PipeIn(), testing.LineOut()
        w = pw.Worker(out, CollectingFamily(), logs.append)
        self.addCleanup(gc.unfreeze)
        t = threading.Thread(target=w.serve, args=(inp,), daemon=True)
        t.start()
        self.assertEqual(out.next_event()["event"], "ready")
        self.assertGreater(gc.get_freeze_count(), 0, "frozen before ready")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "out.rgb")
            open(path, "wb").close()
            inp.send({"op": "run", "id": "j", "settings": {}, "output": path})
            self.assertEqual(out.next_event()["event"], "result")
            inp.close()
            t.join(5)
        self.assertTrue(any(re.match(r"job j: \d+ garbage collections \([1-9]\d* full\) paused it for", line)
                            for line in logs), logs)
        self.assertTrue(any(re.match(r"job j: outside the Task call [\d.]+ ms around it, [\d.]+ ms after it \(0 frames",
                                     line) for line in logs), logs)


class SetupTest(unittest.TestCase):
    def test_a_missing_module_points_to_the_gpu_host_guide(self):
        """A user's GPU host without torch is sent to the README's GPU host section, not to the
        project's own device kit."""
        import importlib.util
        from unittest import mock

        real = importlib.util.find_spec
        missing = lambda name, *a: None if name == "torch" else real(name, *a)  # noqa: E731
        with mock.patch.object(importlib.util, "find_spec", missing):
            with self.assertRaises(RuntimeError) as cm:
                pw.TorchBackend().setup("cpu")
        msg = str(cm.exception)
        self.assertIn("'torch' is not installed", msg)
        self.assertIn('README.md, "On a GPU host"', msg)
        self.assertNotIn("DEVICE-KIT", msg)


if __name__ == "__main__":
    unittest.main()
