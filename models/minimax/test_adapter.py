"""Tests of the MiniMax-H3 adapter and its L0 builder (build_l0.py). The mapping, protocol,
config and marker tests need no torch, diffusers or numpy.

Run from models/minimax:  python3 -m unittest -v test_adapter
(models/minimax/adapter_test.go runs it under `go test ./...`). TinyPipelineTest and
InMemoryPipelineTest run the real modular pipeline on CPU where torch, diffusers, transformers,
accelerate, numpy and torchvision are installed; RealSizeMetaTest and InMemoryBuildTest need
torch, diffusers, transformers and accelerate; `make test` runs them all in the CPU torch
virtualenv (make torch), and elsewhere a missing module makes them "not run", by name.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import adapter  # noqa: E402
import build_l0  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/
from pyworker import parity, testing  # noqa: E402
from pyworker.testing import WorkerTestCase  # noqa: E402


def settings(**over):
    """The row's pinned settings (models/minimax/minimax.go), with a prompt."""
    s = {
        "prompt": "a red fox in snow",
        "size": "1344x768",
        "num_frames": 124,
        "fps": 24,
        "num_inference_steps": 50,
        "guidance": 1,
        "seed": 0,
    }
    s.update(over)
    return s


def gen(seed):
    return ("generator", seed)


class MappingTest(unittest.TestCase):
    def test_settings_to_kwargs(self):
        kw = adapter.pipeline_kwargs(settings(), gen)
        self.assertEqual(kw, {
            "prompt": "a red fox in snow",
            "height": 768,
            "width": 1344,
            "num_frames": 124,
            "num_inference_steps": 50,
            "generator": ("generator", 0),
            "output_type": "pt",
        })
        for absent in ("fps", "guidance_scale", "negative_prompt", "image", "last_image", "references"):
            self.assertNotIn(absent, kw, "t2va takes no %s (the pipeline would only warn about it)" % absent)

    def test_portrait_size_is_height_by_width(self):
        kw = adapter.pipeline_kwargs(settings(size="768x1344"), gen)
        self.assertEqual((kw["width"], kw["height"]), (768, 1344))

    def test_seed_goes_to_the_generator(self):
        seen = []
        for seed in (0, 7, -3, (1 << 63) - 1, -(1 << 63)):
            adapter.pipeline_kwargs(settings(seed=seed), lambda s: seen.append(s))
        self.assertEqual(seen, [0, 7, -3, (1 << 63) - 1, -(1 << 63)])

    def test_seed_must_be_int64(self):
        for bad in (1.5, "42", True, 1 << 63, None):
            with self.subTest(seed=bad):
                with self.assertRaises(adapter.JobError) as cm:
                    adapter.pipeline_kwargs(settings(seed=bad), gen)
                self.assertEqual(cm.exception.param, "seed")
        s = settings()
        del s["seed"]
        with self.assertRaises(adapter.JobError):
            adapter.pipeline_kwargs(s, gen)

    def test_released_frame_range(self):
        self.assertEqual(adapter.RELEASED.frame_range(), (124, 345))
        self.assertEqual([n for n in range(0, 400) if n % 17 == 5 and 5 <= n / 24 <= 15],
                         list(range(124, 346, 17)), "17n+5 within 5..15 s at 24 fps")

    def test_frames_must_be_17n_plus_5_within_5_to_15_s(self):
        for n in range(124, 346, 17):
            self.assertEqual(adapter.pipeline_kwargs(settings(num_frames=n), gen)["num_frames"], n)
        for n in (1, 5, 22, 107, 120, 121, 123, 125, 140, 344, 346, 362, 379, 1000):
            with self.subTest(num_frames=n):
                with self.assertRaises(adapter.JobError) as cm:
                    adapter.pipeline_kwargs(settings(num_frames=n), gen)
                self.assertEqual(cm.exception.code, "unsupported_value")
                self.assertEqual(cm.exception.param, "num_frames")
        for n in (0, -3):
            with self.assertRaises(adapter.JobError) as cm:
                adapter.pipeline_kwargs(settings(num_frames=n), gen)
            self.assertEqual(cm.exception.param, "num_frames")

    def test_frame_messages_say_what_diffusers_would_do(self):
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(num_frames=120), gen)
        self.assertIn("17n+5", cm.exception.message)
        self.assertIn("silently round it up to 124", cm.exception.message)
        self.assertIn("nearest allowed: 124", cm.exception.message)
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(num_frames=200), gen)
        self.assertIn("nearest allowed: 192 or 209", cm.exception.message)
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(num_frames=350), gen)  # 362 is 15.083 s: diffusers raises
        self.assertIn("round it up to 362, then refuse it", cm.exception.message)
        self.assertIn("nearest allowed: 345", cm.exception.message)
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(num_frames=362), gen)  # on the rule, 15.083 s
        self.assertIn("124..345", cm.exception.message)
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(num_frames=107), gen)  # on the rule, 4.458 s
        self.assertIn("5 to 15 s", cm.exception.message)

    def test_geometry_from_the_backend(self):
        g = adapter.Geometry(frames_per_chunk=9, latents_per_chunk=3, fps=8, min_duration=1, max_duration=4,
                             canvas_multiple=16)
        self.assertEqual(g.frame_range(), (12, 30))
        adapter.pipeline_kwargs(settings(size="48x16", num_frames=21, fps=8), gen, g)
        with self.assertRaises(adapter.JobError):
            adapter.pipeline_kwargs(settings(size="48x16", num_frames=124, fps=8), gen, g)
        with self.assertRaises(adapter.JobError):
            adapter.pipeline_kwargs(settings(size="40x16", num_frames=21, fps=8), gen, g)

    def test_size_multiple_of_32_is_not_rounded(self):
        for ok in ("1344x768", "768x1344", "1280x704", "32x32", "128x32", "32x128"):
            adapter.pipeline_kwargs(settings(size=ok), gen)
        for bad in ("1280x720", "1366x768", "1344x760", "848x480", "16x16"):
            with self.subTest(size=bad):
                with self.assertRaises(adapter.JobError) as cm:
                    adapter.pipeline_kwargs(settings(size=bad), gen)
                self.assertEqual((cm.exception.code, cm.exception.param), ("unsupported_value", "size"))
                self.assertIn("multiple of 32", cm.exception.message)

    def test_aspect_ratio_limits(self):
        for bad in ("160x32", "32x160", "1344x288"):
            with self.subTest(size=bad):
                with self.assertRaises(adapter.JobError) as cm:
                    adapter.pipeline_kwargs(settings(size=bad), gen)
                self.assertEqual((cm.exception.code, cm.exception.param), ("unsupported_value", "size"))
                self.assertIn("1:4 to 4:1", cm.exception.message)

    def test_fps_is_fixed_at_24(self):
        for bad in (16, 25, 30):
            with self.assertRaises(adapter.JobError) as cm:
                adapter.pipeline_kwargs(settings(fps=bad), gen)
            self.assertEqual((cm.exception.code, cm.exception.param), ("unsupported_value", "fps"))

    def test_guidance_is_fixed_at_1(self):
        adapter.pipeline_kwargs(settings(guidance=1.0), gen)
        for bad in (0, 0.5, 1.5, 5):
            with self.assertRaises(adapter.JobError) as cm:
                adapter.pipeline_kwargs(settings(guidance=bad), gen)
            self.assertEqual((cm.exception.code, cm.exception.param), ("unsupported_value", "guidance"))
            self.assertIn("guidance-distilled", cm.exception.message)

    def test_no_negative_prompt(self):
        adapter.pipeline_kwargs(settings(negative_prompt=""), gen)  # the server omits an empty one
        adapter.pipeline_kwargs(settings(negative_prompt=None), gen)
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(negative_prompt="blurry"), gen)
        self.assertEqual((cm.exception.code, cm.exception.param), ("unsupported_value", "negative_prompt"))

    def test_steps_count_sigma_grid_points(self):
        for ok in (2, 3, 50, 100):
            self.assertEqual(adapter.pipeline_kwargs(settings(num_inference_steps=ok), gen)["num_inference_steps"], ok)
        for bad in (1, 0, -1):
            with self.assertRaises(adapter.JobError) as cm:
                adapter.pipeline_kwargs(settings(num_inference_steps=bad), gen)
            self.assertEqual((cm.exception.code, cm.exception.param), ("unsupported_value", "num_inference_steps"))

    def test_malformed_settings(self):
        cases = {
            "size": ["1344", "1344x", "x768", "0x768", "1344X768", "-1344x768", 1344, None, "１344x768"],
            "num_frames": [124.0, "124", None, True],
            "num_inference_steps": [2.0, "30", None],
            "fps": [0, 24.0, None],
            "guidance": ["1", None, True, float("nan"), float("inf")],
            "prompt": [None, 3, ""],
        }
        for key, values in cases.items():
            for v in values:
                with self.subTest(key=key, value=v):
                    with self.assertRaises(adapter.JobError) as cm:
                        adapter.pipeline_kwargs(settings(**{key: v}), gen)
                    self.assertEqual(cm.exception.param, key)
        with self.assertRaises(adapter.JobError):
            adapter.pipeline_kwargs(None, gen)
        with self.assertRaises(adapter.JobError):
            adapter.pipeline_kwargs(settings(negative_prompt=5), gen)

    def test_actual(self):
        a = adapter.actual_for(settings(), 124, 1344, 768, 50)
        self.assertEqual(a, {
            "num_frames": 124, "width": 1344, "height": 768, "fps": 24, "duration_s": 124 / 24,
            "num_inference_steps": 50, "guidance": 1.0, "seed": 0, "precision": "bf16",
        })
        self.assertIsInstance(a["guidance"], float)

    def test_report_step_counts_grid_points(self):
        calls = []
        for i in range(4):  # 5 steps: 4 iterations
            adapter.report_step(lambda p, idx, t, kw: calls.append((p, idx, t, kw)), "pipe", i, 0.5)
        self.assertEqual([c[1] for c in calls], [1, 2, 3, 4])
        self.assertEqual(calls[0], ("pipe", 1, 0.5, {}))
        adapter.report_step(None, "pipe", 0, 0.5)  # no callback (warm-up): nothing


class FakePipe(testing.FakePipe):
    """Stands in for MiniMaxH3ModularPipeline(..., output="videos")[0] with the adapter's hook
    in its loop: N steps run N-1 iterations, each ending in report_step; the frames depend on the
    seed only through the generator (so equal seeds give equal bytes)."""

    def steps(self, kw):
        return kw["num_inference_steps"] - 1

    def step(self, kw, i):
        adapter.report_step(kw.get("callback_on_step_end"), self, i, i / kw["num_inference_steps"])

    def output(self, kw):
        _, seed = kw["generator"]
        f, h, w = kw["num_frames"], kw["height"], kw["width"]
        rows = [[[y / max(h - 1, 1), x / max(w - 1, 1), 0.5] for x in range(w)] for y in range(h)]
        # Shared rows keep a 124-frame clip cheap; the first pixel of a frame carries seed and index.
        return [[[[((seed + fi) % 5) / 4, 0.0, 0.0]] + rows[0][1:]] + rows[1:] for fi in range(f)]

class FakeBackend(testing.FakeBackend):
    geometry = adapter.RELEASED


SMALL = {"size": "32x32", "num_frames": 124}


class ProtocolTest(WorkerTestCase, testing.ProtocolContract):
    adapter = adapter
    fake_pipe = FakePipe
    fake_backend = FakeBackend

    def submit(self, job_id, **over):
        out = self.path(job_id + ".rgb")
        self.inp.send({"op": "run", "id": job_id, "settings": settings(**dict(SMALL, **over)), "output": out})
        return out

    def test_ready_run_result(self):
        ticks = iter([10.0, 10.5])
        self.start(clock=lambda: next(ticks))
        ready = self.out.next_event()
        self.assertEqual((ready["event"], ready["precision"], ready["pid"], ready["weights"]),
                         ("ready", "bf16", os.getpid(), "fake"))
        out = self.submit("job-1", size="64x32", num_inference_steps=4)
        res, progress = self.until("result", "job-1")
        # 4 steps are 3 iterations; progress counts grid points reached, ending at 4 of 4.
        self.assertEqual([(p["done"], p["total"]) for p in progress], [(2, 4), (3, 4), (4, 4)])
        self.assertEqual((res["frames"], res["width"], res["height"]), (124, 64, 32))
        self.assertEqual(res["actual"], {
            "num_frames": 124, "width": 64, "height": 32, "fps": 24, "duration_s": 124 / 24,
            "num_inference_steps": 4, "guidance": 1.0, "seed": 0, "precision": "bf16"})
        self.assertEqual((res["task_wall_ms"], res["peak_memory_mb"]), (500.0, 1234.5))
        self.assertEqual(os.path.getsize(out), 124 * 32 * 64 * 3)
        self.assertEqual(self.backend.events, ["reset_peak", "call", "sync"])
        kw = self.pipe.calls[0]
        self.assertEqual((kw["height"], kw["width"], kw["num_frames"], kw["generator"]), (32, 64, 124, ("generator", 0)))
        self.assertTrue(callable(kw["callback_on_step_end"]))
        self.stop()

    def test_same_seed_same_bytes(self):
        self.start()
        self.out.next_event()
        outs = []
        for i, seed in enumerate((42, 42, 43)):
            out = self.submit("j%d" % i, num_inference_steps=2, seed=seed)
            self.until("result", "j%d" % i)
            with open(out, "rb") as f:
                outs.append(f.read())
        self.assertEqual(outs[0], outs[1])
        self.assertNotEqual(outs[0], outs[2])
        self.stop()

    def test_refused_settings_are_errors_and_the_worker_goes_on(self):
        self.start()
        self.out.next_event()
        for job_id, over, param in (("f", {"num_frames": 120}, "num_frames"), ("s", {"size": "48x32"}, "size"),
                                    ("g", {"guidance": 5}, "guidance"), ("r", {"fps": 16}, "fps"),
                                    ("n", {"num_inference_steps": 1}, "num_inference_steps")):
            out = self.submit(job_id, **over)
            err, progress = self.until("error", job_id)
            self.assertEqual((err["code"], err["param"], progress), ("unsupported_value", param, []))
            self.assertEqual(os.path.getsize(out), 0)
        self.assertEqual(self.pipe.calls, [], "the pipeline never ran")
        self.submit("ok", num_inference_steps=2)
        self.until("result", "ok")
        self.stop()

    def test_cancel_between_steps(self):
        self.start(pipe=FakePipe(step_delay=0.02))
        self.out.next_event()
        self.submit("long", num_inference_steps=200)
        first = self.out.next_event()
        self.assertEqual((first["event"], first["done"]), ("progress", 2))
        self.inp.send({"op": "cancel", "id": "long"})
        err, progress = self.until("error", "long")
        self.assertEqual(err["code"], "cancelled")
        self.assertLess(len(progress) + 1, 199, "stopped early")
        self.assertRegex(err["message"], r"cancelled at step \d+ of 200")
        self.inp.send({"op": "cancel", "id": "long"})  # late: ignored
        self.submit("next", num_inference_steps=2)
        res, _ = self.until("result", "next")
        self.assertEqual(res["frames"], 124)
        self.stop()



class ConfigTest(unittest.TestCase):
    def test_bundle_resolution(self):
        env = {"MEDIAQUAL_BUNDLES": "/data/bundles"}
        c = adapter.parse_args(["--bundle-name", "MiniMaxAI/MiniMax-H3"], env)
        self.assertEqual(c.bundle, "/data/bundles/MiniMaxAI/MiniMax-H3")
        self.assertEqual((c.device, c.offload, c.warmup_steps), ("cuda:0", "auto", 0))
        c = adapter.parse_args(["--bundle-name", "x"], dict(env, MEDIAQUAL_BUNDLE="/b/one", MEDIAQUAL_MINIMAX_DEVICE="cuda:1"))
        self.assertEqual((c.bundle, c.device), ("/b/one", "cuda:1"))
        c = adapter.parse_args(["--bundle", "/explicit", "--device", "cpu", "--offload", "none"], dict(env, MEDIAQUAL_BUNDLE="/b/one"))
        self.assertEqual((c.bundle, c.device, c.offload), ("/explicit", "cpu", "none"))
        self.assertIsNone(adapter.parse_args([], {}).bundle)
        c = adapter.parse_args(["--offload", "text-encoder"], {})
        self.assertEqual(c.offload, "text-encoder")
        with self.assertRaises(SystemExit):
            adapter.parse_args(["--offload", "cpu"], {})

    def test_layout(self):
        c = adapter.parse_args(["--layout", "ulysses-4"], {"MEDIAQUAL_RANK": "3"})
        self.assertEqual((c.layout, c.device), ("ulysses-4", "cuda:3"))
        self.assertIsNone(adapter.parse_args([], {}).layout)
        with self.assertRaises(SystemExit):  # guidance-distilled: no branches to split
            adapter.parse_args(["--layout", "cfg-2"], {})

    def test_missing_bundle_fails_before_importing_torch(self):
        with self.assertRaises(RuntimeError) as cm:
            adapter.DiffusersBackend(adapter.Config(os.path.join(tempfile.gettempdir(), "no-such-bundle")))
        self.assertIn("modular_model_index.json", str(cm.exception))
        with tempfile.TemporaryDirectory() as d:
            # A classic (non-modular) snapshot is not a MiniMax-H3 bundle.
            with open(os.path.join(d, "model_index.json"), "w") as f:
                f.write("{}")
            with self.assertRaises(RuntimeError) as cm:
                adapter.DiffusersBackend(adapter.Config(d))
            self.assertIn(d, str(cm.exception))
        with self.assertRaises(RuntimeError):
            adapter.DiffusersBackend(adapter.Config(None))

    def test_module_imports_no_torch(self):
        self.assertNotIn("torch", sys.modules)
        self.assertNotIn("diffusers", sys.modules)


# --------------------------------------------------------------------------------------------
# The real modular pipeline, tiny, on CPU


_byte_level_alphabet = build_l0.byte_level_alphabet


def build_tiny_bundle(out):
    """Writes a MiniMax-H3 modular bundle with random weights at tiny sizes: every component the
    t2va workflow loads, of its real class, configured here. The geometry that matters is kept:
    VAE 16x spatial with 17-frame chunks of 5 latents (so 17n+5 frames, canvas multiple 32),
    transformer patch (1, 2, 2), and a Qwen3-VL with more than 50 text layers (the pipeline reads
    hidden_states[50])."""
    import torch
    from diffusers import (AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio, MiniMaxH3Scheduler,
                           MiniMaxH3Transformer3DModel)
    from diffusers.modular_pipelines import MiniMaxH3Blocks
    from transformers import Qwen2TokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    torch.manual_seed(0)
    vocab = {"<|endoftext|>": 0}
    for ch in _byte_level_alphabet():
        vocab[ch] = len(vocab)
    vision = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tokenizer = Qwen2TokenizerFast(vocab=vocab, merges=[], additional_special_tokens=vision)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in vision}
    text_dim = 16
    text_encoder = Qwen3VLForConditionalGeneration(Qwen3VLConfig(
        text_config=dict(hidden_size=text_dim, intermediate_size=32, num_hidden_layers=51, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=8, vocab_size=len(tokenizer) + 8,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=text_dim,
                           patch_size=16, spatial_merge_size=2, temporal_patch_size=2, deepstack_visual_indexes=[0],
                           num_position_embeddings=64),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )).eval()
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=tokenizer,
                                 video_processor=Qwen3VLVideoProcessor())
    # rotary: 3 axes x 2 x rope_freq_dim = 12 channels of a 16-wide head
    transformer = MiniMaxH3Transformer3DModel(
        num_attention_heads=2, attention_head_dim=16, hidden_size=32, num_layers=1, num_refiner_layers=1,
        ffn_dim=32, in_channels=4, audio_in_channels=4, text_dim=text_dim, freq_dim=16,
        time_embed_hidden_dim=16, time_embed_dim=16, rope_freq_dim=2)
    vae = AutoencoderKLMiniMaxH3(
        latent_channels=4, block_out_channels=(8,) * 6, layers_per_block=1, norm_num_groups=4,
        decoder_num_layers=1, decoder_num_attention_heads=2, decoder_attention_head_dim=8,
        latents_mean=(0.0,) * 4, latents_std=(1.0,) * 4)
    audio_vae = AutoencoderKLMiniMaxH3Audio(
        encoder_dim=4, encoder_rates=(2, 2), latent_dim=8, latent_channels=4, num_attention_heads=2, decoder_dim=8,
        decoder_rates=(2, 2), decoder_kernel_sizes=(4, 4), resblock_kernel_sizes=(3,), resblock_dilation_sizes=((1,),),
        sampling_rate=160, latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
    pipe = MiniMaxH3Blocks().get_workflow("t2va").init_pipeline()
    pipe.update_components(text_encoder=text_encoder, tokenizer=tokenizer, processor=processor,
                           transformer=transformer, vae=vae, audio_vae=audio_vae,
                           scheduler=MiniMaxH3Scheduler(shift=12.0), audio_scheduler=MiniMaxH3Scheduler(shift=3.0))
    pipe.save_pretrained(out, overwrite_modular_index=True)
    with open(os.path.join(out, "L0-RANDOM.txt"), "w") as f:
        f.write("RANDOM weights at tiny sizes (models/minimax/test_adapter.py): mechanics only, never quality.\n")



def first_job(test):
    """A tiny real worker's ready line and first job at 64x32, 124 frames, 3 steps (2
    transformer calls, each reported by the hook in the real loop); returns its result and frames."""
    ready = test.recv()
    test.assertEqual((ready["event"], ready["precision"], ready["weights"]), ("ready", "bf16", "L0-random"), ready)
    # One eager device and no layout: the served runtime is the reference itself, no figure
    # against itself; the fp32 floor is measured.
    p = ready["parity"]
    test.assertTrue(p["passed"], p)
    test.assertEqual((p["served"], p["rel_l2"], p["max_abs"]), ("is the reference", None, None), p)
    test.assertGreater(p["cond_fp32_reference"], 0.0, p)
    ev, data, progress = test.job("a")
    test.assertEqual(ev["event"], "result", ev)
    test.assertEqual(ev["actual"]["parity"], ready["parity"], "and so does every result")
    test.assertEqual((ev["frames"], ev["width"], ev["height"]), (124, 64, 32))
    test.assertEqual(len(data), 124 * 32 * 64 * 3)
    test.assertEqual(progress, [(2, 3), (3, 3)])
    return ev, data

@testing.needs("torch", "diffusers", "transformers", "accelerate", "numpy", "torchvision")
class TinyPipelineTest(testing.RealWorkerTestCase):
    """The real path end to end, on CPU: a tiny bundle of the real MiniMax-H3 component classes,
    loaded by adapter.py (a subprocess, as mediaserve runs it) through the real modular pipeline,
    the step hook included, serving jobs over the protocol."""

    @classmethod
    def setUpClass(cls):
        here = os.path.dirname(os.path.abspath(__file__))
        cls.tmp = tempfile.mkdtemp()
        bundle = os.path.join(cls.tmp, "MiniMaxAI", "MiniMax-H3")
        build_tiny_bundle(bundle)
        cls.start_worker([sys.executable, os.path.join(here, "adapter.py"), "--bundle", bundle, "--device", "cpu", "--offload", "none"])

    def job(self, job_id, cancel_after_first_step=False, **over):
        s = settings(size="64x32", num_inference_steps=3)
        s.update(over)
        return self.run_job(job_id, s, cancel_after_first_step=cancel_after_first_step)

    def test_protocol_over_the_real_pipeline(self):
        ev, data = first_job(self)
        actual = dict(ev["actual"])
        actual.pop("parity")  # first_job checked it: the figures of ready
        self.assertEqual(actual, {
            "num_frames": 124, "width": 64, "height": 32, "fps": 24, "duration_s": 124 / 24,
            "num_inference_steps": 3, "guidance": 1.0, "seed": 0, "precision": "bf16"})
        self.assertGreater(len(set(data)), 1, "not a constant clip")
        _, again, _ = self.job("b")
        self.assertEqual(data, again, "same seed, same frames")
        _, other, _ = self.job("c", seed=43)
        self.assertNotEqual(data, other)
        for job_id, over, param in (("d", {"num_frames": 120}, "num_frames"), ("e", {"size": "48x32"}, "size"),
                                    ("f", {"num_inference_steps": 1}, "num_inference_steps")):
            ev, _, _ = self.job(job_id, **over)
            self.assertEqual((ev["event"], ev["code"], ev["param"]), ("error", "unsupported_value", param))
        # 1000 steps take seconds even at this size; the cancel lands between two of them.
        ev, data, progress = self.job("x", cancel_after_first_step=True, num_inference_steps=1000)
        self.assertEqual((ev["event"], ev["code"], data), ("error", "cancelled", b""), ev)
        self.assertLess(len(progress), 999)
        ev, data, progress = self.job("g", size="32x64", num_frames=141, num_inference_steps=2)
        self.assertEqual((ev["frames"], ev["width"], ev["height"], len(data)), (141, 32, 64, 141 * 64 * 32 * 3))
        self.assertEqual(progress, [(2, 2)])
        self.proc.stdin.close()
        self.assertEqual(self.proc.wait(30), 0)

    def test_parity_refuses_a_wrong_runtime(self):
        """Parity before ready on the real modular pipeline (its step-end hook ends the call
        after one step): a runtime that attends over each half of the sequence on its own
        (faults.py, injected at load) never becomes ready, and the error says which layout,
        fault and figure."""
        from pyworker import faults

        bundle = os.path.join(self.tmp, "MiniMaxAI", "MiniMax-H3")
        with mock.patch.dict(os.environ, {faults.ENV: "attention-half"}):
            with self.assertRaisesRegex(parity.ParityError, r"engine eager, layout single \(fault attention-half\) differs from "
                                                            r"eager on one device: .*its cond prediction is [0-9.]+ from fp32"):
                adapter.DiffusersBackend(adapter.Config(bundle, device="cpu", offload="none", warmup_steps=2,
                                                        warmup_size="64x32", warmup_frames=124))

    def test_ulysses_2_is_held_to_one_rank_by_parity(self):
        """The model card's layout, ulysses, on two CPU ranks (testdata/tiny_minimax_parallel.py):
        parity finds it bit for bit eager's on one rank, and refuses it by name once the
        attention processors lose the layout's config (each rank attending over its own shard:
        1.3 % off eager here, 3 times eager's distance from fp32)."""
        bundle = os.path.join(self.tmp, "MiniMaxAI", "MiniMax-H3")
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "tiny_minimax_parallel.py")

        # Both cases in one invocation, in the same two ranks; the refused one last.
        out = subprocess.run([sys.executable, script, bundle, "ulysses-2", "local-attention"], capture_output=True, text=True,
                             timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr[-4000:])
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        self.assertEqual(sorted((r["case"], r["rank"]) for r in lines),
                         [("local-attention", 0), ("local-attention", 1), ("ulysses-2", 0), ("ulysses-2", 1)],
                         out.stdout + out.stderr[-4000:])
        for r in (r for r in lines if r["case"] == "ulysses-2"):
            self.assertNotIn("error", r)
            self.assertTrue(r["parity"]["passed"], r)
            self.assertEqual((r["parity"]["rel_l2"], r["parity"]["max_abs"]), (0.0, 0.0), r)
        for r in (r for r in lines if r["case"] == "local-attention"):
            self.assertRegex(r.get("error", ""), r"ParityError: parity: engine eager, layout ulysses-2 differs from eager "
                                                 r"on one device: .*its cond prediction is [0-9.]+ from fp32", r)

    def test_device_quantizing_gives_the_numpy_paths_bytes(self):
        """The frames quantized where the pipeline made them (output_type "pt", to_rgb24) are the
        bytes of the pipeline's own numpy output through rgb24, the path used before; another
        seed's differ, so the comparison can fail."""
        import numpy as np

        b = adapter.DiffusersBackend(adapter.Config(os.path.join(self.tmp, "MiniMaxAI", "MiniMax-H3"), device="cpu",
                                                    offload="none"))
        kw = adapter.pipeline_kwargs(settings(size="64x32", num_inference_steps=2), b.generator, b.geometry)
        self.assertEqual(kw["output_type"], "pt")
        got = b.call(dict(kw))
        self.assertEqual((got.shape, got.dtype), ((124, 32, 64, 3), np.uint8))

        def numpy_path(seed):
            with b.torch.inference_mode():
                video = b.pipe(**dict(kw, output_type="np", generator=b.generator(seed)), output="videos")[0]
            return adapter.pw.rgb24(video)

        self.assertTrue(np.array_equal(got, numpy_path(0)))
        self.assertFalse(np.array_equal(got, numpy_path(1)))


# --------------------------------------------------------------------------------------------
# In-memory L0 bundles (build_l0.py): configs only, weights drawn at load

# The real sizes, counted on the meta device (build_l0.py --dry-run; diffusers 0.42.1,
# transformers 5.17): parameters, and bytes as loaded in bf16 (fp32 where kept).
REAL_PARAMS = {"transformer": 33_122_992_896, "text_encoder": 33_357_390_064, "vae": 2_603_868_984,
               "audio_vae": 151_321_489}
REAL_BF16_BYTES = {"transformer": 66_280_430_080, "text_encoder": 66_714_780_128, "vae": 5_569_011_760,
                   "audio_vae": 605_285_956}


def write_skeleton(d, drop=(), weights=()):
    """A hand-made config-only bundle (no torch needed): the index, the marker with its IN-MEMORY
    line, the models' config.json files less those in drop, an empty weight file for each of
    weights."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, adapter.INDEX), "w") as f:
        f.write("{}")
    with open(os.path.join(d, "L0-RANDOM.txt"), "w") as f:
        f.write(build_l0.marker_text(build_l0.plan(tiny=True), 7, {n: {"params": 1} for n in build_l0.MODELS}))
    for name in build_l0.MODELS:
        os.makedirs(os.path.join(d, name), exist_ok=True)
        if name not in drop:
            with open(os.path.join(d, name, "config.json"), "w") as f:
                f.write("{}")
        if name in weights:
            open(os.path.join(d, name, "diffusion_pytorch_model.safetensors"), "wb").close()


class InMemoryBundleTest(WorkerTestCase):
    """The marker, the configs and the bundle checks: pure, no torch."""

    adapter = adapter
    fake_pipe = FakePipe
    fake_backend = FakeBackend

    def test_marker_says_in_memory_with_its_seed(self):
        text = build_l0.marker_text(build_l0.plan(), 5, {n: {"params": REAL_PARAMS[n]} for n in build_l0.MODELS})
        self.assertTrue(text.startswith("L0-RANDOM: this bundle holds RANDOM weights"))
        self.assertIn("IN-MEMORY WEIGHTS (seed 5): this bundle holds no weight files", text)
        self.assertIn("never for quality", text)
        self.assertIn('"transformer": 33122992896', text)
        self.assertEqual(build_l0.in_memory_seed(text), 5)
        self.assertEqual(build_l0.in_memory_seed("IN-MEMORY WEIGHTS (seed -3): ..."), -3)
        for other in ("", "L0-RANDOM: RANDOM weights at tiny sizes", "see: IN-MEMORY WEIGHTS (seed 1)"):
            self.assertIsNone(build_l0.in_memory_seed(other), other)

    def test_real_configs(self):
        p = build_l0.plan()
        t = p["transformer"]
        self.assertEqual((t["hidden_size"], t["num_layers"], t["num_attention_heads"], t["attention_head_dim"],
                          t["ffn_dim"], t["in_channels"], t["audio_in_channels"], t["text_dim"]),
                         (5376, 50, 56, 128, 14336, 24, 32, 5120))
        text, vision = p["text_encoder"]["text_config"], p["text_encoder"]["vision_config"]
        self.assertEqual((text["hidden_size"], text["num_hidden_layers"], text["intermediate_size"],
                          text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"], text["vocab_size"]),
                         (5120, 64, 25600, 64, 8, 128, 151936))
        self.assertEqual((vision["depth"], vision["hidden_size"], vision["intermediate_size"], vision["num_heads"],
                          vision["out_hidden_size"], vision["patch_size"], vision["spatial_merge_size"],
                          vision["temporal_patch_size"], vision["deepstack_visual_indexes"],
                          vision["num_position_embeddings"]),
                         (27, 1152, 4304, 16, 5120, 16, 2, 2, [8, 16, 24], 2304))
        self.assertEqual(text["hidden_size"], t["text_dim"], "the transformer reads the text encoder's hidden state")
        self.assertEqual(vision["out_hidden_size"], text["hidden_size"])
        self.assertEqual(p["vae"]["latent_channels"], t["in_channels"])
        self.assertEqual(p["audio_vae"]["latent_channels"], t["audio_in_channels"])
        self.assertEqual(p["schedulers"], {"scheduler": 12.0, "audio_scheduler": 3.0})
        tiny = build_l0.plan(tiny=True)
        self.assertGreater(tiny["text_encoder"]["text_config"]["num_hidden_layers"], 50, "the pipeline reads hidden_states[50]")
        self.assertEqual(tiny["transformer"]["text_dim"], tiny["text_encoder"]["text_config"]["hidden_size"])
        for q in (p, tiny):
            v = q["vae"]
            spatial = 1
            for f in v["spatial_downsample_factors"]:
                spatial *= f
            self.assertEqual((spatial, v["clip_length"], v["token_drop"]), (16, 17, 3), "16x, 17n+5 frames")
            ids = q["text_encoder"]
            self.assertLess(max(ids["image_token_id"], ids["video_token_id"]), q["text_encoder"]["text_config"]["vocab_size"])

    def test_broken_config_only_bundle_names_the_missing_file(self):
        with tempfile.TemporaryDirectory() as d:
            write_skeleton(d, drop=("transformer",))
            want = os.path.join(d, "transformer", "config.json")
            with self.assertRaises(RuntimeError) as cm:
                adapter.DiffusersBackend(adapter.Config(d, device="cpu", offload="none"))
            self.assertIn(want, str(cm.exception))
            self.assertIn("build_l0.py", str(cm.exception))
            # Through the protocol: a fatal event naming the file, exit 1.
            self.start(load=lambda: adapter.DiffusersBackend(adapter.Config(d, device="cpu", offload="none")))
            ev = self.out.next_event()
            self.assertEqual(ev["event"], "fatal")
            self.assertIn(want, ev["message"])
            self.thread.join(5)
            self.assertEqual(self.rc, [1])

    def test_in_memory_marker_with_weight_files_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            write_skeleton(d, weights=("vae",))
            with self.assertRaises(RuntimeError) as cm:
                adapter.in_memory_seed(d)
            self.assertIn("vae/diffusion_pytorch_model.safetensors", str(cm.exception))
        with tempfile.TemporaryDirectory() as d:
            write_skeleton(d)
            self.assertEqual(adapter.in_memory_seed(d), 7)
            os.remove(os.path.join(d, "L0-RANDOM.txt"))
            self.assertIsNone(adapter.in_memory_seed(d), "no marker: a bundle with its weights")


@testing.needs("torch", "diffusers", "transformers", "accelerate")
class RealSizeMetaTest(unittest.TestCase):
    """The real-size configs instantiate (on the meta device: no memory) with the released
    architecture's parameter counts."""

    def test_parameter_counts(self):
        models = build_l0.meta_models(build_l0.plan())
        sizes = build_l0.counts(models)
        self.assertAlmostEqual(sizes["transformer"]["params"] / 1e9, 33.12, delta=0.01)
        self.assertEqual({n: sizes[n]["params"] for n in build_l0.MODELS}, REAL_PARAMS)
        self.assertEqual({n: sizes[n]["bf16_bytes"] for n in build_l0.MODELS}, REAL_BF16_BYTES)
        self.assertEqual((sizes["text_encoder"]["vision_params"], sizes["text_encoder"]["lm_head_params"]),
                         (595_266_800, 151936 * 5120))
        self.assertTrue(all(p.is_meta for m in models.values() for p in m.parameters()))

    def test_real_configs_are_the_class_defaults(self):
        import torch
        from diffusers import AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio, MiniMaxH3Transformer3DModel

        p = build_l0.plan()
        with torch.device("meta"):
            for cls, cfg in ((MiniMaxH3Transformer3DModel, p["transformer"]), (AutoencoderKLMiniMaxH3, p["vae"]),
                             (AutoencoderKLMiniMaxH3Audio, p["audio_vae"])):
                default = dict(cls().config)
                for key, value in cfg.items():
                    if key in ("latents_mean", "latents_std") and default[key] is None:
                        continue
                    want = list(value) if isinstance(value, (list, tuple)) else value
                    got = default[key]
                    got = [list(g) if isinstance(g, (list, tuple)) else g for g in got] if isinstance(got, (list, tuple)) else got
                    want = [list(w) if isinstance(w, (list, tuple)) else w for w in want] if isinstance(want, list) else want
                    self.assertEqual(got, want, "%s.%s" % (cls.__name__, key))

    def test_dry_run_writes_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "bundles")
            proc = subprocess.run([sys.executable, os.path.join(HERE, "build_l0.py"), "--out", out, "--dry-run"],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertIn("33,122,992,896", proc.stdout)
            self.assertIn("33,357,390,064", proc.stdout)
            self.assertFalse(os.path.exists(out))


@testing.needs("torch", "diffusers", "transformers", "accelerate", "torchvision")
class MemoryPlanTest(unittest.TestCase):
    """memory.py on the real-size config-only bundle: each model's bytes from its config on the
    meta device, each layout's per-rank host and GPU bytes, and a layout that cannot fit a lent
    H200 host (125 GiB available, a 139.8 GiB GPU) refused with its figures, before loading."""

    H200 = {"host_available": 125 * 2**30, "gpu_total": 150_104_850_432}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.bundle = build_config_only(cls.tmp, tiny=False)
        import memory

        cls.memory = memory
        cls.sizes = memory.model_bytes(cls.bundle)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def fits(self, layout, offload, ranks):
        self.memory.check(self.memory.plan(self.sizes, offload, ranks), layout, offload, **self.H200)

    def test_bytes_from_the_configs(self):
        self.assertEqual(self.sizes, REAL_BF16_BYTES)

    def test_layouts_on_an_h200_host(self):
        self.fits(None, "text-encoder", 1)  # what the published native run did: 62.1 GiB host, 67.5 GPU
        self.fits(None, "none", 1)  # 129.6 GiB of weights on one 139.8 GiB GPU
        with self.assertRaisesRegex(RuntimeError, r"layout ulysses-4 with offload text-encoder cannot fit this host: "
                                                  r"4 rank\(s\) x 62\.1 GiB = 248\.5 GiB of host memory, 125\.0 GiB available"):
            self.fits("ulysses-4", "text-encoder", 4)
        with self.assertRaisesRegex(RuntimeError, r"layout single with offload auto cannot fit this host: "
                                                  r"1 rank\(s\) x 129\.6 GiB = 129\.6 GiB of host memory"):
            self.fits(None, "auto", 1)  # a real bundle: the ComponentsManager first moves it all to the host
        p = self.memory.plan(self.sizes, "auto", 4)
        self.assertEqual((p["host"], p["gpu"]), (sum(REAL_BF16_BYTES.values()), REAL_BF16_BYTES["text_encoder"]))

    def test_the_adapter_refuses_before_loading(self):
        """On this machine's CPU the whole 129.6 GiB would be host memory: refused by name, with
        nothing drawn (the check is before the load)."""
        with self.assertRaisesRegex(RuntimeError, r"cannot fit this host: 1 rank\(s\) x 129\.6 GiB"):
            adapter.DiffusersBackend(adapter.Config(self.bundle, device="cpu", offload="none"))


HERE = os.path.dirname(os.path.abspath(__file__))


def build_config_only(out, tiny=True, seed=0):
    """build_l0.py --tiny as a subprocess, as the GPU script runs it; returns the bundle dir."""
    argv = [sys.executable, os.path.join(HERE, "build_l0.py"), "--out", out, "--seed", str(seed)]
    proc = subprocess.run(argv + (["--tiny"] if tiny else []), capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError("build_l0.py failed: %s" % proc.stderr[-2000:])
    return os.path.join(out, "MiniMaxAI", "MiniMax-H3")


# The tiny config-only bundle (seed 0) InMemoryBuildTest and InMemoryPipelineTest both read:
# built once for the module, removed after it; tearDownModule fails the run if a test changed it.
_shared = {}


def shared_config_only():
    """The shared bundle's directory, built by the first class that asks."""
    if not _shared:
        tmp = tempfile.mkdtemp()
        try:
            bundle = build_config_only(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _shared.update(tmp=tmp, bundle=bundle, files=tree_digest(bundle))
    return _shared["bundle"]


def tree_digest(d):
    """Every file under d: its path and SHA-256."""
    import hashlib

    out = {}
    for root, _, files in os.walk(d):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, d)] = hashlib.sha256(f.read()).hexdigest()
    return out


def tearDownModule():
    if _shared:
        try:
            if tree_digest(_shared["bundle"]) != _shared["files"]:
                raise AssertionError("the shared config-only bundle %s was changed by a test" % _shared["bundle"])
        finally:
            shutil.rmtree(_shared["tmp"], ignore_errors=True)


@testing.needs("torch", "diffusers", "transformers", "accelerate", "torchvision")
class InMemoryBuildTest(unittest.TestCase):
    """The adapter's in-memory build, tiny, on CPU, against what a normal construction and the
    real loader give."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()  # this class's own files
        cls.bundle = shared_config_only()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_bundle_holds_configs_only(self):
        files = sorted(os.path.relpath(os.path.join(r, f), self.bundle) for r, _, fs in os.walk(self.bundle) for f in fs)
        for name in build_l0.MODELS:
            self.assertIn(os.path.join(name, "config.json"), files)
            self.assertEqual(build_l0.weight_files(os.path.join(self.bundle, name)), [])
        self.assertFalse([f for f in files if f.endswith((".safetensors", ".bin"))], files)
        with open(os.path.join(self.bundle, adapter.INDEX)) as f:
            index = json.load(f)
        for name in ("transformer", "text_encoder", "vae", "audio_vae", "tokenizer", "processor", "scheduler",
                     "audio_scheduler"):
            self.assertEqual(index[name][2]["subfolder"], name)
        self.assertEqual(adapter.in_memory_seed(self.bundle), 0)

    def test_buffers_equal_a_normal_construction(self):
        import torch
        from transformers import Qwen3VLConfig

        models, sizes = adapter.build_in_memory(self.bundle, "cpu", 0, torch)
        classes = build_l0.model_classes()
        for name, m in models.items():
            path = os.path.join(self.bundle, name)
            if name == "text_encoder":
                ref = classes[name](Qwen3VLConfig.from_pretrained(path))
            else:
                ref = classes[name].from_config(classes[name].load_config(path))
            got, want = dict(m.named_buffers()), dict(ref.named_buffers())
            self.assertEqual(sorted(got), sorted(want), name)
            self.assertTrue(got, "%s has buffers (rotary inv_freq, filters)" % name)
            for key in want:
                self.assertEqual(got[key].dtype, want[key].dtype, key)
                self.assertTrue(torch.equal(got[key], want[key]), "%s.%s differs from a normal construction" % (name, key))
            self.assertEqual(sizes[name], sum(p.numel() for p in ref.parameters()))
            self.assertFalse(any(p.is_meta for p in m.parameters()), name)
        # N(0, INIT_STD) for the drawn ones.
        for name in ("transformer", "text_encoder"):
            flat = torch.cat([p.detach().float().flatten() for p in models[name].parameters()])
            self.assertAlmostEqual(flat.std().item(), build_l0.INIT_STD, delta=0.002)
            self.assertAlmostEqual(flat.mean().item(), 0.0, delta=0.002)

    def test_dtypes_and_values_survive_the_real_loader(self):
        """Saved with weights and loaded back by load_components(dtype=bf16): every parameter and
        buffer has the dtype the in-memory build gave it (bf16, fp32 where kept), and the values."""
        import torch
        from diffusers.modular_pipelines import MiniMaxH3Blocks, MiniMaxH3ModularPipeline

        models, _ = adapter.build_in_memory(self.bundle, "cpu", 0, torch)
        saved = os.path.join(self.tmp, "with-weights")
        pipe = MiniMaxH3Blocks().get_workflow("t2va").init_pipeline()
        pipe.update_components(**models)
        pipe.save_pretrained(saved, overwrite_modular_index=True)
        for name in ("tokenizer", "processor", "scheduler", "audio_scheduler"):
            shutil.copytree(os.path.join(self.bundle, name), os.path.join(saved, name))
        with open(os.path.join(self.bundle, adapter.INDEX)) as f:
            index = json.load(f)
        for value in index.values():
            if isinstance(value, list):
                value[2]["pretrained_model_name_or_path"] = saved
        with open(os.path.join(saved, adapter.INDEX), "w") as f:
            json.dump(index, f)
        loaded = MiniMaxH3ModularPipeline(blocks=MiniMaxH3Blocks().get_workflow("t2va"), pretrained_model_name_or_path=saved)
        loaded.load_components(dtype=torch.bfloat16)
        fp32 = 0
        for name, m in models.items():
            other = getattr(loaded, name)
            mine = dict(list(m.named_parameters()) + list(m.named_buffers()))
            theirs = dict(list(other.named_parameters()) + list(other.named_buffers()))
            self.assertEqual(sorted(mine), sorted(theirs), name)
            for key, t in mine.items():
                self.assertEqual(t.dtype, theirs[key].dtype, "%s.%s" % (name, key))
                self.assertTrue(torch.equal(t, theirs[key]), "%s.%s" % (name, key))
                fp32 += t.dtype == torch.float32
        self.assertGreater(fp32, 0, "some modules are kept in fp32")
        self.assertEqual(models["transformer"].proj_in.weight.dtype, torch.float32)
        self.assertEqual(models["transformer"].transformer_blocks[0].attn.to_q.weight.dtype, torch.bfloat16)
        self.assertEqual(models["text_encoder"].lm_head.weight.dtype, torch.bfloat16)

    def test_same_seed_same_weights(self):
        import torch

        a, _ = adapter.build_in_memory(self.bundle, "cpu", 0, torch)
        b, _ = adapter.build_in_memory(self.bundle, "cpu", 0, torch)
        c, _ = adapter.build_in_memory(self.bundle, "cpu", 1, torch)
        for name in build_l0.MODELS:
            pa, pb, pc = (dict(x[name].named_parameters()) for x in (a, b, c))
            self.assertTrue(all(torch.equal(pa[k], pb[k]) for k in pa), name)
            self.assertFalse(all(torch.equal(pa[k], pc[k]) for k in pa), name)


@testing.needs("torch", "diffusers", "transformers", "accelerate", "numpy", "torchvision")
class InMemoryPipelineTest(testing.RealWorkerTestCase):
    """adapter.py (a subprocess, as mediaserve runs it) on a config-only bundle made by
    build_l0.py --tiny: the models are drawn at load, and jobs run through the real pipeline."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()  # this class's own files
        cls.bundle = shared_config_only()
        cls.start_worker(cls.argv("none"))

    @classmethod
    def argv(cls, offload, bundle=None):
        return [sys.executable, os.path.join(HERE, "adapter.py"), "--bundle", bundle or cls.bundle, "--device", "cpu",
                "--offload", offload]

    def job(self, job_id, **over):
        s = settings(size="64x32", num_inference_steps=3)
        s.update(over)
        return self.run_job(job_id, s)

    def test_jobs_over_in_memory_weights(self):
        ev, data = first_job(self)
        self.assertGreater(len(set(data)), 1, "not a constant clip")
        _, again, _ = self.job("b")
        self.assertEqual(data, again, "same seed, same bytes")
        _, other, _ = self.job("c", seed=43)
        self.assertNotEqual(data, other)
        self.proc.stdin.close()
        self.assertEqual(self.proc.wait(30), 0)
        # The text encoder kept on the host and copied in for each encoding: the same bytes.
        self.proc = subprocess.Popen(self.argv("text-encoder"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        try:
            ready = self.recv()
            self.assertEqual(ready["event"], "ready", ready)
            for job_id in ("d", "e"):
                ev, offloaded, _ = self.job(job_id)
                self.assertEqual(ev["event"], "result", ev)
                self.assertEqual(offloaded, data, "--offload text-encoder changes nothing but placement")
            self.proc.stdin.close()
            self.assertEqual(self.proc.wait(30), 0)
            self.assertIn("offload text-encoder", self.proc.stderr.read())
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.stdout.close()
            self.proc.stderr.close()
            del self.proc  # tearDownClass sees the class's (ended) worker

    def test_broken_bundle_is_a_fatal_naming_the_file(self):
        broken = os.path.join(self.tmp, "broken")
        shutil.copytree(self.bundle, broken)
        os.remove(os.path.join(broken, "transformer", "config.json"))
        proc = subprocess.run(self.argv("none", broken), input="", capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        ev = json.loads(proc.stdout.splitlines()[0])
        self.assertEqual(ev["event"], "fatal", ev)
        self.assertIn(os.path.join(broken, "transformer", "config.json"), ev["message"])


if __name__ == "__main__":
    unittest.main()
