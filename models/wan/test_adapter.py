"""Tests of the Wan adapter and the L0 bundle builder that need no torch, diffusers or numpy.

Run from the repository root or from models/wan:  python3 -m unittest -v test_adapter
(models/wan/adapter_test.go runs it under `go test ./...`).
"""

import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import adapter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/
from pyworker import testing  # noqa: E402
from pyworker import worker as pw  # noqa: E402
from pyworker.testing import WorkerTestCase  # noqa: E402
import build_l0  # noqa: E402


def settings(**over):
    s = {
        "prompt": "a red fox in snow",
        "size": "832x480",
        "num_frames": 17,
        "fps": 16,
        "num_inference_steps": 30,
        "guidance": 5,
        "seed": 42,
    }
    s.update(over)
    return s


def gen(seed):
    return ("generator", seed)


class MappingTest(unittest.TestCase):
    def test_settings_to_kwargs(self):
        kw = adapter.pipeline_kwargs(settings(negative_prompt="blurry"), gen)
        self.assertEqual(kw, {
            "prompt": "a red fox in snow",
            "negative_prompt": "blurry",
            "height": 480,
            "width": 832,
            "num_frames": 17,
            "num_inference_steps": 30,
            "guidance_scale": 5.0,
            "generator": ("generator", 42),
            "output_type": "pt",
        })
        self.assertIsInstance(kw["guidance_scale"], float)
        self.assertNotIn("fps", kw, "fps is a container property, not a pipeline argument")

    def test_portrait_size_is_height_by_width(self):
        kw = adapter.pipeline_kwargs(settings(size="480x832"), gen)
        self.assertEqual((kw["width"], kw["height"]), (480, 832))

    def test_negative_prompt_default_is_empty(self):
        self.assertEqual(adapter.pipeline_kwargs(settings(), gen)["negative_prompt"], "")
        self.assertEqual(adapter.pipeline_kwargs(settings(negative_prompt=None), gen)["negative_prompt"], "")

    def test_seed_goes_to_the_generator(self):
        seen = []
        adapter.pipeline_kwargs(settings(seed=7), lambda s: seen.append(s))
        adapter.pipeline_kwargs(settings(seed=-3), lambda s: seen.append(s))
        adapter.pipeline_kwargs(settings(seed=(1 << 63) - 1), lambda s: seen.append(s))
        self.assertEqual(seen, [7, -3, (1 << 63) - 1])

    def test_seed_must_be_int64(self):
        for bad in (1.5, "42", True, 1 << 63, None):
            with self.subTest(seed=bad):
                with self.assertRaises(adapter.JobError) as cm:
                    adapter.pipeline_kwargs(settings(seed=bad), gen)
                self.assertEqual(cm.exception.param, "seed")
        with self.assertRaises(adapter.JobError):
            s = settings()
            del s["seed"]
            adapter.pipeline_kwargs(s, gen)

    def test_frames_must_be_4k_plus_1(self):
        for n in (1, 5, 17, 81, 121):
            self.assertEqual(adapter.pipeline_kwargs(settings(num_frames=n), gen)["num_frames"], n)
        for n in (0, 2, 4, 16, 18, 120, -3):
            with self.subTest(num_frames=n):
                with self.assertRaises(adapter.JobError) as cm:
                    adapter.pipeline_kwargs(settings(num_frames=n), gen)
                self.assertEqual(cm.exception.code, "unsupported_value")
                self.assertEqual(cm.exception.param, "num_frames")
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(num_frames=16), gen)
        self.assertIn("4k+1", cm.exception.message)
        self.assertIn("13", cm.exception.message, "says what diffusers would have produced")

    def test_frame_step_from_the_backend(self):
        adapter.pipeline_kwargs(settings(num_frames=9), gen, frame_step=8)
        with self.assertRaises(adapter.JobError):
            adapter.pipeline_kwargs(settings(num_frames=13), gen, frame_step=8)

    def test_size_multiple_is_not_rounded(self):
        adapter.pipeline_kwargs(settings(size="1280x704"), gen, size_multiple=(32, 32))
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(size="848x480"), gen, size_multiple=(32, 32))
        self.assertEqual(cm.exception.code, "unsupported_value")
        self.assertEqual(cm.exception.param, "size")
        adapter.pipeline_kwargs(settings(size="848x480"), gen)  # Wan2.1: 16
        with self.assertRaises(adapter.JobError):
            adapter.pipeline_kwargs(settings(size="840x480"), gen)

    def test_malformed_settings(self):
        cases = {
            "size": ["832", "832x", "x480", "0x480", "832X480", "-832x480", 832, None, "８32x480"],
            "num_inference_steps": [0, -1, 2.0, "30", None],
            "fps": [0, 16.0, None],
            "guidance": ["5", None, True, float("nan"), float("inf")],
            "prompt": [None, 3],
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
        a = adapter.actual_for(settings(), 17, 832, 480, 30)
        self.assertEqual(a, {
            "num_frames": 17, "width": 832, "height": 480, "fps": 16, "duration_s": 1.0625,
            "num_inference_steps": 30, "guidance": 5.0, "seed": 42, "precision": "bf16",
        })
        b = adapter.actual_for(settings(size="1280x704", num_frames=121, fps=24, guidance=3.5), 121, 1280, 704, 50)
        self.assertEqual(b["duration_s"], 121 / 24)
        self.assertEqual((b["fps"], b["guidance"], b["num_inference_steps"]), (24, 3.5, 50))


class FakePipe(testing.FakePipe):
    """Stands in for WanPipeline: frames whose pixels depend on the seed only through the
    generator (so equal seeds give equal bytes)."""

    def output(self, kw):
        _, seed = kw["generator"]
        f, h, w = kw["num_frames"], kw["height"], kw["width"]
        return [[[[((seed + fi + y + x) % 5) / 4, y / max(h - 1, 1), x / max(w - 1, 1)]
                  for x in range(w)] for y in range(h)] for fi in range(f)]

class FakeBackend(testing.FakeBackend):
    size_multiple = (16, 16)
    frame_step = 4


class ProtocolTest(WorkerTestCase, testing.ProtocolContract):
    adapter = adapter
    fake_pipe = FakePipe
    fake_backend = FakeBackend

    def submit(self, job_id, **over):
        out = self.path(job_id + ".rgb")
        s = settings(size="16x16", num_frames=5, num_inference_steps=2)
        s.update(over)
        self.inp.send({"op": "run", "id": job_id, "settings": s, "output": out})
        return out

    def test_ready_run_result(self):
        ticks = iter([10.0, 10.5])
        self.start(clock=lambda: next(ticks))
        ready = self.out.next_event()
        self.assertEqual(ready["event"], "ready")
        self.assertEqual(ready["precision"], "bf16")
        self.assertEqual(ready["pid"], os.getpid())
        out = self.path("job-1.rgb")
        self.inp.send({"op": "run", "id": "job-1", "settings": settings(size="32x16", num_frames=5, num_inference_steps=3), "output": out})
        res, progress = self.until("result", "job-1")
        self.assertEqual([(p["done"], p["total"]) for p in progress], [(1, 3), (2, 3), (3, 3)])
        self.assertEqual((res["frames"], res["width"], res["height"]), (5, 32, 16))
        self.assertEqual(res["actual"], {
            "num_frames": 5, "width": 32, "height": 16, "fps": 16, "duration_s": 5 / 16,
            "num_inference_steps": 3, "guidance": 5.0, "seed": 42, "precision": "bf16"})
        self.assertEqual(res["task_wall_ms"], 500.0)
        self.assertEqual(res["peak_memory_mb"], 1234.5)
        self.assertEqual(os.path.getsize(out), 5 * 16 * 32 * 3)
        self.assertEqual(self.backend.events, ["reset_peak", "call", "sync"], "clock stops after synchronize")
        kw = self.pipe.calls[0]
        self.assertEqual((kw["height"], kw["width"], kw["generator"]), (16, 32, ("generator", 42)))
        self.stop()

    def test_same_seed_same_bytes(self):
        self.start()
        self.out.next_event()
        outs = []
        for i, seed in enumerate((42, 42, 43)):
            out = self.path("j%d.rgb" % i)
            self.inp.send({"op": "run", "id": "j%d" % i, "settings": settings(size="16x16", num_frames=5, num_inference_steps=1, seed=seed), "output": out})
            self.until("result", "j%d" % i)
            with open(out, "rb") as f:
                outs.append(f.read())
        self.assertEqual(outs[0], outs[1])
        self.assertNotEqual(outs[0], outs[2])
        self.stop()

    def test_bad_frames_is_an_error_and_the_worker_goes_on(self):
        self.start()
        self.out.next_event()
        out = self.path("bad.rgb")
        self.inp.send({"op": "run", "id": "bad", "settings": settings(num_frames=16), "output": out})
        err, progress = self.until("error", "bad")
        self.assertEqual(err["code"], "unsupported_value")
        self.assertEqual(err["param"], "num_frames")
        self.assertIn("4k+1", err["message"])
        self.assertEqual(progress, [])
        self.assertEqual(self.pipe.calls, [], "the pipeline never ran")
        self.assertEqual(os.path.getsize(out), 0)
        self.inp.send({"op": "run", "id": "ok", "settings": settings(size="16x16", num_frames=5, num_inference_steps=1), "output": self.path("ok.rgb")})
        self.until("result", "ok")
        self.stop()

    def test_cancel_between_steps(self):
        self.start(pipe=FakePipe(step_delay=0.02))
        self.out.next_event()
        self.inp.send({"op": "run", "id": "long", "settings": settings(size="16x16", num_frames=5, num_inference_steps=200), "output": self.path("long.rgb")})
        first = self.out.next_event()
        self.assertEqual((first["event"], first["done"]), ("progress", 1))
        self.inp.send({"op": "cancel", "id": "long"})
        err, progress = self.until("error", "long")
        self.assertEqual(err["code"], "cancelled")
        self.assertLess(len(progress) + 1, 200, "stopped early")
        self.assertIn("cancelled at step", err["message"])
        # A late cancel for a job that ended is ignored; the next job runs normally.
        self.inp.send({"op": "cancel", "id": "long"})
        self.inp.send({"op": "run", "id": "next", "settings": settings(size="16x16", num_frames=5, num_inference_steps=2), "output": self.path("next.rgb")})
        res, _ = self.until("result", "next")
        self.assertEqual(res["frames"], 5)
        self.stop()

    def test_non_finite_frames(self):
        class NaNPipe(FakePipe):
            def __call__(self, **kw):
                return [[[[float("nan"), 0.0, 0.0]]]]

        self.start(pipe=NaNPipe())
        self.out.next_event()
        self.inp.send({"op": "run", "id": "n", "settings": settings(size="16x16", num_frames=1), "output": self.path("n.rgb")})
        err, _ = self.until("error", "n")
        self.assertEqual(err["code"], "non_finite_output")
        self.stop()



class ConfigTest(unittest.TestCase):
    def test_bundle_resolution(self):
        env = {"MEDIAQUAL_BUNDLES": "/data/bundles"}
        c = adapter.parse_args(["--flow-shift", "3.0", "--bundle-name", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"], env)
        self.assertEqual(c.bundle, "/data/bundles/Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
        self.assertEqual((c.flow_shift, c.device, c.warmup_steps), (3.0, "cuda:0", 0))
        c = adapter.parse_args(["--flow-shift", "5", "--bundle-name", "x"], dict(env, MEDIAQUAL_BUNDLE="/b/one", MEDIAQUAL_WAN_DEVICE="cuda:1"))
        self.assertEqual((c.bundle, c.flow_shift, c.device), ("/b/one", 5.0, "cuda:1"))
        c = adapter.parse_args(["--flow-shift", "3", "--bundle", "/explicit", "--device", "cpu"], dict(env, MEDIAQUAL_BUNDLE="/b/one"))
        self.assertEqual((c.bundle, c.device), ("/explicit", "cpu"))
        self.assertIsNone(adapter.parse_args(["--flow-shift", "3"], {}).bundle)
        c = adapter.parse_args(["--flow-shift", "3", "--layout", "cfg-2"], {"MEDIAQUAL_RANK": "1"})
        self.assertEqual((c.layout, c.device), ("cfg-2", "cuda:1"))
        with self.assertRaises(SystemExit):
            adapter.parse_args(["--flow-shift", "3", "--layout", "cfg-3"], {})

    def test_missing_bundle_fails_before_importing_torch(self):
        with self.assertRaises(RuntimeError) as cm:
            adapter.DiffusersBackend(adapter.Config(os.path.join(tempfile.gettempdir(), "no-such-bundle"), 3.0))
        self.assertIn("model_index.json", str(cm.exception))
        with self.assertRaises(RuntimeError) as cm:  # no bundle named at all: said so, not "at None"
            adapter.DiffusersBackend(adapter.Config(None, 3.0))
        self.assertIn("no diffusers bundle given: set MEDIAQUAL_BUNDLES", str(cm.exception))
        self.assertNotIn("None", str(cm.exception))

    def test_module_imports_no_torch(self):
        self.assertNotIn("torch", sys.modules)
        self.assertNotIn("diffusers", sys.modules)


class BuildL0Test(unittest.TestCase):
    def test_umt5_xxl(self):
        c = build_l0.umt5_config()
        for k, v in {"d_model": 4096, "d_ff": 10240, "num_layers": 24, "num_heads": 64, "d_kv": 64,
                     "vocab_size": 256384, "feed_forward_proj": "gated-gelu",
                     "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128}.items():
            self.assertEqual(c[k], v, k)
        n = build_l0.estimate_umt5_params(c)
        self.assertAlmostEqual(n / 1e9, 5.68, delta=0.01)

    def test_wan21_transformer(self):
        c = build_l0.transformer_config("wan2.1-t2v-1.3b")
        for k, v in {"num_layers": 30, "num_attention_heads": 12, "attention_head_dim": 128, "ffn_dim": 8960,
                     "in_channels": 16, "out_channels": 16, "text_dim": 4096, "freq_dim": 256,
                     "patch_size": [1, 2, 2], "qk_norm": "rms_norm_across_heads", "cross_attn_norm": True,
                     "eps": 1e-6}.items():
            self.assertEqual(c[k], v, k)
        self.assertAlmostEqual(build_l0.estimate_transformer_params(c) / 1e9, 1.42, delta=0.01)

    def test_wan22_transformer(self):
        c = build_l0.transformer_config("wan2.2-ti2v-5b")
        self.assertEqual((c["num_layers"], c["num_attention_heads"], c["ffn_dim"], c["in_channels"]), (30, 24, 14336, 48))
        self.assertAlmostEqual(build_l0.estimate_transformer_params(c) / 1e9, 5.0, delta=0.05)

    def test_vaes(self):
        v = build_l0.vae_config("wan2.1-t2v-1.3b")
        self.assertEqual((v["base_dim"], v["z_dim"], v["dim_mult"], v["num_res_blocks"], v["temperal_downsample"]),
                         (96, 16, [1, 2, 4, 4], 2, [False, True, True]))
        self.assertEqual((len(v["latents_mean"]), len(v["latents_std"])), (16, 16))
        v = build_l0.vae_config("wan2.2-ti2v-5b")
        self.assertEqual((v["z_dim"], v["base_dim"], v["decoder_base_dim"], v["patch_size"], v["scale_factor_spatial"]),
                         (48, 160, 256, 2, 16))
        self.assertEqual((len(v["latents_mean"]), len(v["latents_std"])), (48, 48))
        t = build_l0.transformer_config("wan2.2-ti2v-5b")
        self.assertEqual(t["in_channels"], v["z_dim"])

    def test_scheduler_and_variants(self):
        s = build_l0.scheduler_config(3.0)
        self.assertEqual((s["prediction_type"], s["use_flow_sigmas"], s["flow_shift"]), ("flow_prediction", True, 3.0))
        self.assertEqual(build_l0.VARIANTS["wan2.1-t2v-1.3b"]["flow_shift"], 3.0)
        self.assertEqual(build_l0.VARIANTS["wan2.2-ti2v-5b"]["flow_shift"], 5.0)
        self.assertEqual(build_l0.VARIANTS["wan2.1-t2v-1.3b"]["bundle"], "Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
        self.assertEqual(build_l0.VARIANTS["wan2.2-ti2v-5b"]["bundle"], "Wan-AI/Wan2.2-TI2V-5B-Diffusers")

    def test_tokenizer_vocab(self):
        v = build_l0.tokenizer_vocab()
        self.assertEqual(v[:3], ["<pad>", "</s>", "<unk>"])
        self.assertEqual(len(v), len(set(v)))
        self.assertLess(len(v), build_l0.umt5_config(tiny=True)["vocab_size"])

    def test_tiny_is_consistent(self):
        for variant in build_l0.VARIANTS:
            p = build_l0.plan(variant, tiny=True)
            self.assertEqual(p["transformer"]["text_dim"], p["text_encoder"]["d_model"])
            self.assertEqual(p["transformer"]["in_channels"], p["vae"]["z_dim"])
            self.assertLess(p["estimated_params"]["text_encoder"] + p["estimated_params"]["transformer"], 5e6)

    def test_dry_run_needs_no_torch(self):
        buf = io.StringIO()
        old, sys.stdout = sys.stdout, buf
        try:
            self.assertEqual(build_l0.main(["--out", "/x", "--dry-run", "--wan22"]), 0)
        finally:
            sys.stdout = old
        self.assertIn("/x/Wan-AI/Wan2.2-TI2V-5B-Diffusers", buf.getvalue())
        self.assertNotIn("torch", sys.modules)

    def test_marker(self):
        text = build_l0.marker_text(build_l0.plan("wan2.1-t2v-1.3b"), 0, {"transformer": 1})
        self.assertIn("RANDOM weights", text)
        self.assertIn("never", text.lower())


# Run with TRITON_INTERPRET=1 (Triton's kernels on CPU tensors), in a process of its own: the
# interpreter is chosen when the kernel is defined.
FUSED_SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from wan import fused
from diffusers import WanTransformer3DModel
from diffusers.models.transformers.transformer_wan import WanAttnProcessor, WanRotaryPosEmbed

def compiled_formula(x, w, cos, sin, eps, heads):
    # torch's rms_norm decomposition (what inductor compiles), then WanAttnProcessor's RoPE
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).bfloat16().unflatten(2, (heads, -1))
    x1, x2 = y.float().unflatten(-1, (-1, 2)).unbind(-1)  # inductor computes the products in fp32
    c, s = cos[..., 0::2].float(), sin[..., 1::2].float()
    out = torch.empty_like(y)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out.flatten(2)

res = {"kernel": []}
torch.manual_seed(0)
for batch, frames, heads, head_dim, dtype in ((1, 2, 2, 32, torch.float32), (2, 1, 3, 32, torch.float32),
                                              (1, 2, 2, 32, torch.bfloat16)):
    rope = WanRotaryPosEmbed(head_dim, (1, 2, 2), 1024).to(dtype)
    cos, sin = rope(torch.empty(1, 4, frames, 8, 12))
    x = (3 * torch.randn(batch, cos.shape[1], heads * head_dim)).bfloat16()
    norm = torch.nn.RMSNorm(heads * head_dim, eps=1e-6).bfloat16()
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(heads * head_dim))
    got = fused.norm_rope(x, norm, cos, sin, head_dim)
    want = compiled_formula(x, norm.weight, cos, sin, 1e-6, heads)
    res["kernel"].append([list(x.shape) + [str(dtype)], int((got != want).sum()), got.numel()])
model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=4,
                              out_channels=4, text_dim=16, freq_dim=32, ffn_dim=64, num_layers=2).bfloat16().eval()
args = dict(hidden_states=torch.randn(1, 4, 2, 8, 12).bfloat16(), timestep=torch.tensor([500]),
            encoder_hidden_states=torch.randn(1, 512, 16).bfloat16(), return_dict=False)
with torch.no_grad():
    plain = model(**args)[0].float()
    res["modules"] = fused.apply(model)
    res["processors"] = sorted({type(p).__name__ for p in model.attn_processors.values()})
    got = model(**args)[0].float()
res["rel_diff"] = float((got - plain).norm() / plain.norm())
print(json.dumps(res))
"""


@testing.needs("torch", "diffusers", "triton")
class FusedKernelTest(unittest.TestCase):
    """fused.py's q/k norm and RoPE (pyworker/fused.py's kernel with the row as one norm group),
    run by Triton's interpreter on CPU tensors: its bytes are the compiled processor's formula's
    (both roundings included, rows of a non-power-of-two pair count, a batch of two); and a tiny
    WanTransformer3DModel with it and linear_gelu gives the plain model's output to bf16
    rounding. Its speed and its bytes on the GPU: scripts/gpu-runs/speed.sh wan."""

    def test_kernel_and_processor(self):
        import subprocess

        env = dict(os.environ, TRITON_INTERPRET="1")
        models = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        r = subprocess.run([sys.executable, "-c", FUSED_SCRIPT, models], env=env, capture_output=True,
                           text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        res = json.loads(r.stdout.strip().splitlines()[-1])
        for shape, differ, n in res["kernel"]:
            self.assertEqual(differ, 0, "%d of %d values differ from the compiled formula's at %s" % (differ, n, shape))
        self.assertEqual(res["modules"], {"self-attention q/k norm and RoPE": 4, "feed-forward GELU": 2},
                         "self- and cross-attention of two blocks, and their feed-forwards")
        self.assertEqual(res["processors"], ["FusedSelfAttention"])
        self.assertGreater(res["rel_diff"], 0.0, "the processor is in use")
        self.assertLess(res["rel_diff"], 0.02, "the same attention to bf16 rounding")


# The tiny bundles (Wan2.1's and Wan2.2's, one bundles root) that TinyPipelineTest and
# StreamCheckTest load, only ever read. adapter_test.go builds them once (build_tiny) for these
# tests and stream_test.go's, and names the root in TINY_ENV; without that variable they are
# built here, once for the process, into a temporary directory.
TINY_ENV = "MEDIAQUAL_WAN_TINY"
_tiny = {}


def build_tiny(out):
    """build_l0.py --tiny --device cpu of each variant into the bundles root out, in this
    process (one import of torch for both)."""
    for variant in sorted(build_l0.VARIANTS):
        if build_l0.main(["--tiny", "--device", "cpu", "--out", out, "--variant", variant]) != 0:
            raise RuntimeError("build_l0.py --tiny --variant %s failed" % variant)


def tiny_bundle(variant):
    """The tiny bundle of variant, in the shared root (built in a subprocess where TINY_ENV is
    unset: this process imports no torch for it)."""
    if "root" not in _tiny:
        import subprocess

        root = os.environ.get(TINY_ENV)
        if not root:
            root = tempfile.mkdtemp()
            try:
                subprocess.run([sys.executable, "-c", "import sys, test_adapter; test_adapter.build_tiny(sys.argv[1])", root],
                               cwd=HERE, check=True, stdout=subprocess.DEVNULL)
            except BaseException:
                import shutil

                shutil.rmtree(root, ignore_errors=True)
                raise
            _tiny["tmp"] = root
        _tiny["root"] = root
    bundle = os.path.join(_tiny["root"], build_l0.VARIANTS[variant]["bundle"])
    if not os.path.isfile(os.path.join(bundle, "model_index.json")):
        raise RuntimeError("%s=%s holds no tiny %s bundle built by build_tiny: unset it to build one here"
                           % (TINY_ENV, _tiny["root"], variant))
    return bundle


def tearDownModule():
    if "tmp" in _tiny:
        import shutil

        shutil.rmtree(_tiny["tmp"], ignore_errors=True)


@testing.needs("torch", "diffusers", "transformers", "accelerate", "numpy")
class TinyPipelineTest(testing.RealWorkerTestCase):
    """The real path end to end, on CPU: build_l0.py --tiny writes a bundle, adapter.py (a
    subprocess, as mediaserve runs it) loads it with diffusers and serves jobs over the protocol.
    `make test` runs it in the CPU torch virtualenv (make torch); elsewhere a missing module
    makes it "not run", by name."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()  # this class's own files: outputs
        bundle = tiny_bundle("wan2.1-t2v-1.3b")
        cls.start_worker([sys.executable, os.path.join(HERE, "adapter.py"), "--bundle", bundle, "--flow-shift", "3.0", "--device", "cpu"])
        cls.ready = json.loads(cls.proc.stdout.readline() or "{}")  # before any test's job

    def job(self, job_id, **over):
        s = settings(size="64x48", num_frames=5, num_inference_steps=2)
        s.update(over)
        ev, data, _ = self.run_job(job_id, s)
        return ev, data

    def test_protocol_over_the_real_pipeline(self):
        ready = self.ready
        self.assertEqual((ready.get("event"), ready.get("precision"), ready.get("weights")), ("ready", "bf16", "L0-random"))
        parity = ready.get("parity") or {}
        self.assertTrue(parity.get("passed"), ready)
        self.assertEqual((parity["served"], parity["rel_l2"], parity["max_abs"]), ("is the reference", None, None),
                         "eager on one device is the reference itself: no figure against itself")
        self.assertGreater(parity["cond_fp32_reference"], 0.0, "the fp32 floor was measured")
        ev, data = self.job("a")
        self.assertEqual(ev["event"], "result", ev)
        self.assertEqual((ev["frames"], ev["width"], ev["height"]), (5, 64, 48))
        self.assertEqual(len(data), 5 * 48 * 64 * 3)
        self.assertEqual(ev["actual"]["num_inference_steps"], 2)
        _, again = self.job("b")
        self.assertEqual(data, again, "same seed, same frames")
        _, other = self.job("c", seed=43)
        self.assertNotEqual(data, other)
        ev, _ = self.job("d", num_frames=16)
        self.assertEqual((ev["event"], ev["code"]), ("error", "unsupported_value"))
        ev, data = self.job("e", size="48x64", num_frames=9)
        self.assertEqual((ev["frames"], ev["width"], ev["height"], len(data)), (9, 48, 64, 9 * 64 * 48 * 3))
        self.proc.stdin.close()
        self.assertEqual(self.proc.wait(30), 0)

    def test_frames_stream_while_the_vae_decodes(self):
        """Wan's VAE decodes 1 frame, then 4 a latent frame: each chunk is announced as it is
        written, before the result, and the file ends as the whole clip (the adapter has
        compared the streamed frames with the clip's own on the device)."""
        ev, data = self.job("s", num_frames=9)
        self.assertEqual(ev["event"], "result", ev)
        self.assertEqual(self.streamed, [(1, 64, 48), (5, 64, 48), (9, 64, 48)])
        self.assertEqual(len(data), 9 * 48 * 64 * 3)


@testing.needs("torch", "diffusers", "transformers", "accelerate", "numpy")
class StreamCheckTest(unittest.TestCase):
    """The device-side check of streamed frames, in process on the tiny bundle: frames that
    are not the clip's own first frames fail the job (stream_mismatch), and the same job
    without the fault streams every frame and ends in the unstreamed bytes."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()  # this class's own files: outputs
        cls.bundle = tiny_bundle("wan2.1-t2v-1.3b")
        cls.bundle22 = tiny_bundle("wan2.2-ti2v-5b")

    @classmethod
    def tearDownClass(cls):
        import shutil

        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_family(self, family, name, streams=True, size="64x48"):
        family.streams = streams
        out = os.path.join(self.tmp, name)
        worker = pw.Worker(io.StringIO(), family, lambda m: None)
        events = []
        worker.emit = events.append
        worker.run(name, {"id": name, "settings": settings(size=size, num_frames=5, num_inference_steps=2),
                          "output": out})
        self.assertIn(events[-1]["event"], ("result", "error"), events)
        with open(out, "rb") as f:
            return events, f.read()

    def family(self, bundle, flow_shift):
        family = pw.PipelineFamily(lambda: adapter.DiffusersBackend(adapter.Config(bundle, flow_shift, device="cpu")),
                                   adapter._kwargs_for, adapter._actual)
        family.load()
        return family

    def test_wan22_streams_its_patched_vae_chunk_by_chunk(self):
        """Wan2.2's VAE works on 2x2 patches: each chunk is unpatchified on its own."""
        family = self.family(self.bundle22, 5.0)
        self.assertIsNotNone(family.backend.pipe.vae.config.patch_size)
        events, streamed = self.run_family(family, "streamed22", size="64x32")
        self.assertEqual([(e["event"], e.get("frames")) for e in events if e["event"] != "progress"],
                         [("frames", 1), ("frames", 5), ("result", 5)])
        _, whole = self.run_family(family, "whole22", streams=False, size="64x32")
        self.assertEqual(streamed, whole)

    def test_streamed_frames_are_checked_against_the_clip(self):
        family = self.family(self.bundle, 3.0)
        events, streamed = self.run_family(family, "streamed")
        self.assertEqual([(e["event"], e.get("frames")) for e in events if e["event"] != "progress"],
                         [("frames", 1), ("frames", 5), ("result", 5)])
        events, whole = self.run_family(family, "whole", streams=False)
        self.assertEqual([e["event"] for e in events if e["event"] != "progress"], ["result"])
        self.assertEqual(streamed, whole, "streaming changes no byte")

        b = family.backend
        push = b.stream_frames
        b.stream_frames = lambda x: push(1.0 - x)  # frames that are not the clip's
        try:
            events, _ = self.run_family(family, "broken")
        finally:
            b.stream_frames = push
        self.assertEqual((events[-1]["event"], events[-1]["code"]), ("error", "stream_mismatch"), events[-1])


if __name__ == "__main__":
    unittest.main()
