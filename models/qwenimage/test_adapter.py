"""Tests of the Qwen-Image-Edit adapter and its L0 bundle builder that need no torch, diffusers,
numpy or Pillow, and (TinyPipelineTest, where that stack is installed) of both over the real
pipeline on CPU.

Run from the repository root or from models/qwenimage:  python3 -m unittest -v test_adapter
(models/qwenimage/adapter_test.go runs it under `go test ./...`).
"""

import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import adapter  # noqa: E402

sys.path.insert(0, os.path.dirname(HERE))  # models/
from pyworker import testing  # noqa: E402
from pyworker.testing import WorkerTestCase  # noqa: E402
import build_l0  # noqa: E402


def settings(**over):
    s = {
        "prompt": "make the sky purple",
        "negative_prompt": " ",
        "size": "1024x1024",
        "num_inference_steps": 20,
        "guidance": 4,
        "seed": 42,
    }
    s.update(over)
    return s


def gen(seed):
    return ("generator", seed)


def write_png(path, width, height, rgb=(200, 30, 60), pixels=None, alpha=False):
    """A valid 8-bit RGB PNG (RGBA with alpha=True, opaque, as Go's image/png writes the server's
    reference), written with the standard library only: of one colour, or of pixels (rgb24 bytes,
    row-major)."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    if pixels is None:
        pixels = bytes(rgb) * (width * height)
    stride = 3 * width
    rows = []
    for y in range(height):
        row = pixels[y * stride:(y + 1) * stride]
        if alpha:
            row = b"".join(row[i:i + 3] + b"\xff" for i in range(0, len(row), 3))
        rows.append(b"\x00" + row)  # filter type 0 per row
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6 if alpha else 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(b"".join(rows))))
        f.write(chunk(b"IEND", b""))


def read_png(path):
    """Decode what write_png writes (8-bit RGB, filter 0): the fake backend's Image.open."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise OSError("not a PNG: %s" % path)
    pos, idat, width = 8, b"", None
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if (depth, colour) != (8, 2):
                raise OSError("not 8-bit RGB")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 1 + 3 * width
    return {"width": width, "height": height, "rows": [raw[y * stride + 1:(y + 1) * stride] for y in range(height)]}


class MappingTest(unittest.TestCase):
    def test_settings_to_kwargs(self):
        kw = adapter.pipeline_kwargs(settings(negative_prompt="blurry"), "IMG", gen)
        self.assertEqual(kw, {
            "image": ["IMG"],
            "prompt": "make the sky purple",
            "negative_prompt": "blurry",
            "true_cfg_scale": 4.0,
            "guidance_scale": 1.0,
            "num_inference_steps": 20,
            "height": 1024,
            "width": 1024,
            "generator": ("generator", 42),
            "num_images_per_prompt": 1,
            "output_type": "pt",
        })
        self.assertIsInstance(kw["true_cfg_scale"], float)

    def test_guidance_is_true_cfg(self):
        kw = adapter.pipeline_kwargs(settings(guidance=7.5), "IMG", gen)
        self.assertEqual((kw["true_cfg_scale"], kw["guidance_scale"]), (7.5, 1.0))

    def test_negative_prompt_default_is_the_pinned_space(self):
        s = settings()
        del s["negative_prompt"]
        self.assertEqual(adapter.pipeline_kwargs(s, "IMG", gen)["negative_prompt"], " ")
        for absent in (None, ""):  # the server omits an empty one
            self.assertEqual(adapter.pipeline_kwargs(settings(negative_prompt=absent), "IMG", gen)["negative_prompt"], " ")
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(negative_prompt=5), "IMG", gen)
        self.assertEqual(cm.exception.param, "negative_prompt")

    def test_size_must_be_a_multiple_of_16(self):
        kw = adapter.pipeline_kwargs(settings(size="832x1248"), "IMG", gen)
        self.assertEqual((kw["width"], kw["height"]), (832, 1248))
        for bad in ("1000x1024", "1024x1000", "1030x1030", "8x8"):
            with self.subTest(size=bad):
                with self.assertRaises(adapter.JobError) as cm:
                    adapter.pipeline_kwargs(settings(size=bad), "IMG", gen)
                self.assertEqual((cm.exception.code, cm.exception.param), ("unsupported_value", "size"))
                self.assertIn("crop", cm.exception.message)
        for bad in ("1024", "0x1024", "1024X1024", None):
            with self.assertRaises(adapter.JobError) as cm:
                adapter.pipeline_kwargs(settings(size=bad), "IMG", gen)
            self.assertEqual((cm.exception.code, cm.exception.param), ("invalid_request", "size"))

    def test_seed_goes_to_the_generator(self):
        seen = []
        for seed in (7, -3, (1 << 63) - 1):
            adapter.pipeline_kwargs(settings(seed=seed), "IMG", seen.append)
        self.assertEqual(seen, [7, -3, (1 << 63) - 1])
        for bad in (1.5, "42", True, 1 << 63, None):
            with self.subTest(seed=bad):
                with self.assertRaises(adapter.JobError) as cm:
                    adapter.pipeline_kwargs(settings(seed=bad), "IMG", gen)
                self.assertEqual(cm.exception.param, "seed")

    def test_one_step_is_refused(self):
        self.assertEqual(adapter.pipeline_kwargs(settings(num_inference_steps=2), "IMG", gen)["num_inference_steps"], 2)
        with self.assertRaises(adapter.JobError) as cm:
            adapter.pipeline_kwargs(settings(num_inference_steps=1), "IMG", gen)
        self.assertEqual((cm.exception.code, cm.exception.param), ("unsupported_value", "num_inference_steps"))
        self.assertIn("NaN", cm.exception.message)

    def test_no_video_settings(self):
        adapter.pipeline_kwargs(settings(num_frames=0, fps=0), "IMG", gen)
        for key in ("num_frames", "fps"):
            with self.assertRaises(adapter.JobError) as cm:
                adapter.pipeline_kwargs(settings(**{key: 1}), "IMG", gen)
            self.assertEqual(cm.exception.param, key)

    def test_malformed_settings(self):
        for key, values in {"num_inference_steps": [0, 2.0, None], "guidance": ["4", None, float("nan")], "prompt": [None, 3]}.items():
            for v in values:
                with self.subTest(key=key, value=v):
                    with self.assertRaises(adapter.JobError) as cm:
                        adapter.pipeline_kwargs(settings(**{key: v}), "IMG", gen)
                    self.assertEqual(cm.exception.param, key)
        with self.assertRaises(adapter.JobError):
            adapter.pipeline_kwargs([], "IMG", gen)

    def test_actual_has_no_video_fields(self):
        self.assertEqual(adapter.actual_for(settings(), 1024, 1024, 20), {
            "width": 1024, "height": 1024, "num_inference_steps": 20, "guidance": 4.0, "seed": 42, "precision": "bf16"})


class FakePipe(testing.FakePipe):
    """Stands in for QwenImageEditPlusPipeline: one image whose pixels depend on the
    reference's colour and the seed."""

    def output(self, kw):
        ref = kw["image"][0]
        r = ref["rows"][0][0] / 255
        _, seed = kw["generator"]
        h, w = kw["height"], kw["width"]
        return [[[[r, (seed % 7) / 6, x / max(w - 1, 1)] for x in range(w)] for _ in range(h)]]

class FakeBackend(testing.FakeBackend):
    size_multiple = (16, 16)

    def open_reference(self, path):
        return read_png(path)

    def peak_memory_mb(self):
        return 58000.25


class ProtocolTest(WorkerTestCase, testing.ProtocolContract):
    adapter = adapter
    fake_pipe = FakePipe
    fake_backend = FakeBackend

    def submit(self, job_id, **over):
        out = self.path(job_id + ".rgb")
        s = settings(size="16x16", num_inference_steps=2)
        s.update(over)
        ref = self.reference(name=job_id + "-ref.png")  # its own file: the worker may still be reading another job's
        self.inp.send({"op": "run", "id": job_id, "settings": s, "reference": ref, "output": out})
        return out

    def reference(self, name="ref.png", w=20, h=12):
        p = self.path(name, create=False)
        write_png(p, w, h)
        return p

    def test_write_png_is_valid(self):
        p = os.path.join(tempfile.gettempdir(), "mediaqual-qwen-test-%d.png" % os.getpid())
        self.addCleanup(os.remove, p)
        write_png(p, 3, 2, (1, 2, 3))
        png = read_png(p)
        self.assertEqual((png["width"], png["height"], png["rows"]), (3, 2, [b"\x01\x02\x03" * 3] * 2))

    def test_ready_run_result(self):
        ticks = iter([3.0, 3.25])
        self.start(clock=lambda: next(ticks))
        ready = self.out.next_event()
        self.assertEqual((ready["event"], ready["precision"], ready["pid"]), ("ready", "bf16", os.getpid()))
        out, ref = self.path("job-1.rgb"), self.reference()
        s = settings(size="32x16", num_inference_steps=3)
        del s["negative_prompt"]
        self.inp.send({"op": "run", "id": "job-1", "settings": s, "reference": ref, "output": out})
        res, progress = self.until("result", "job-1")
        self.assertEqual([(p["done"], p["total"]) for p in progress], [(1, 3), (2, 3), (3, 3)])
        self.assertEqual((res["frames"], res["width"], res["height"]), (1, 32, 16))
        self.assertEqual(res["actual"], {"width": 32, "height": 16, "num_inference_steps": 3, "guidance": 4.0,
                                         "seed": 42, "precision": "bf16"})
        self.assertEqual((res["task_wall_ms"], res["peak_memory_mb"]), (250.0, 58000.2))
        with open(out, "rb") as f:
            data = f.read()
        self.assertEqual(len(data), 32 * 16 * 3)
        self.assertEqual(data[:3], bytes([200, 0, 0]), "the reference reached the pipeline")
        self.assertEqual(self.backend.events, ["reset_peak", "call", "sync"], "clock stops after synchronize")
        kw = self.pipe.calls[0]
        self.assertEqual((kw["image"][0]["width"], kw["image"][0]["height"]), (20, 12))
        self.assertEqual((kw["negative_prompt"], kw["true_cfg_scale"], kw["guidance_scale"]), (" ", 4.0, 1.0))
        self.assertEqual((kw["generator"], kw["num_images_per_prompt"]), (("generator", 42), 1))
        self.stop()

    def test_bad_size_is_an_error_and_the_worker_goes_on(self):
        self.start()
        self.out.next_event()
        out = self.path("bad.rgb")
        self.inp.send({"op": "run", "id": "bad", "settings": settings(size="1000x1000"), "reference": self.reference(), "output": out})
        err, progress = self.until("error", "bad")
        self.assertEqual((err["code"], err["param"], progress), ("unsupported_value", "size", []))
        self.assertEqual(self.pipe.calls, [], "the pipeline never ran")
        self.assertEqual(os.path.getsize(out), 0)
        self.inp.send({"op": "run", "id": "ok", "settings": settings(size="16x16", num_inference_steps=2),
                       "reference": self.reference(), "output": self.path("ok.rgb")})
        self.until("result", "ok")
        self.stop()

    def test_reference_missing_or_unreadable(self):
        self.start()
        self.out.next_event()
        self.inp.send({"op": "run", "id": "none", "settings": settings(size="16x16"), "output": self.path("n.rgb")})
        err, _ = self.until("error", "none")
        self.assertEqual((err["code"], err["param"]), ("invalid_request", "reference"))
        junk = self.path("junk.png")
        self.inp.send({"op": "run", "id": "junk", "settings": settings(size="16x16"), "reference": junk, "output": self.path("j.rgb")})
        err, _ = self.until("error", "junk")
        self.assertEqual((err["code"], err["param"]), ("invalid_request", "reference"))
        self.stop()

    def test_same_seed_same_bytes(self):
        self.start()
        self.out.next_event()
        ref, outs = self.reference(), []
        for i, seed in enumerate((42, 42, 43)):
            out = self.path("j%d.rgb" % i)
            self.inp.send({"op": "run", "id": "j%d" % i, "settings": settings(size="16x16", num_inference_steps=2, seed=seed),
                           "reference": ref, "output": out})
            self.until("result", "j%d" % i)
            with open(out, "rb") as f:
                outs.append(f.read())
        self.assertEqual(outs[0], outs[1])
        self.assertNotEqual(outs[0], outs[2])
        self.stop()

    def test_cancel_between_steps(self):
        self.start(pipe=FakePipe(step_delay=0.02))
        self.out.next_event()
        self.inp.send({"op": "run", "id": "long", "settings": settings(size="16x16", num_inference_steps=200),
                       "reference": self.reference(), "output": self.path("long.rgb")})
        first = self.out.next_event()
        self.assertEqual((first["event"], first["done"]), ("progress", 1))
        self.inp.send({"op": "cancel", "id": "long"})
        err, progress = self.until("error", "long")
        self.assertEqual(err["code"], "cancelled")
        self.assertLess(len(progress) + 1, 200)
        self.stop()



class ConfigTest(unittest.TestCase):
    def test_bundle_resolution(self):
        env = {"MEDIAQUAL_BUNDLES": "/data/bundles"}
        c = adapter.parse_args(["--bundle-name", "Qwen/Qwen-Image-Edit-2511"], env)
        self.assertEqual((c.bundle, c.device), ("/data/bundles/Qwen/Qwen-Image-Edit-2511", "cuda:0"))
        c = adapter.parse_args(["--bundle-name", "x"], dict(env, MEDIAQUAL_BUNDLE="/b/one", MEDIAQUAL_QWENIMAGE_DEVICE="cuda:1"))
        self.assertEqual((c.bundle, c.device), ("/b/one", "cuda:1"))
        c = adapter.parse_args(["--bundle", "/explicit", "--device", "cpu"], env)
        self.assertEqual((c.bundle, c.device), ("/explicit", "cpu"))
        self.assertIsNone(adapter.parse_args([], {}).bundle)
        c = adapter.parse_args(["--layout", "cfg-2"], {"MEDIAQUAL_RANK": "1"})
        self.assertEqual((c.layout, c.device), ("cfg-2", "cuda:1"))
        with self.assertRaises(SystemExit):
            adapter.parse_args(["--layout", "ring-2"], {})

    def test_missing_bundle_fails_before_importing_torch(self):
        with self.assertRaises(RuntimeError) as cm:
            adapter.DiffusersBackend(adapter.Config(os.path.join(tempfile.gettempdir(), "no-such-bundle")))
        self.assertIn("model_index.json", str(cm.exception))

    def test_graph_engines_are_refused_by_name_before_loading(self):
        """The H200 showed the capture failing inside the load (after the weights, 12-50 s);
        the refusal comes first, with the reason and what is offered, bundle or not."""
        for engine in ("regional-compile-graphs", "regional-compile-fused-graphs"):
            with self.assertRaises(RuntimeError) as cm:
                adapter.DiffusersBackend(adapter.Config("/no-such-bundle", engine=engine))
            self.assertEqual(str(cm.exception), "engine %s is not offered: %s; offered: eager, regional-compile, "
                             "regional-compile-fused" % (engine, adapter.DiffusersBackend.no_graphs))
        with self.assertRaises(RuntimeError) as cm:
            adapter.DiffusersBackend(adapter.Config("/no-such-bundle", engine="regional-compile-fused"))
        self.assertIn("model_index.json", str(cm.exception), "an offered engine goes on to the bundle")

    def test_module_imports_no_torch(self):
        for mod in ("torch", "diffusers", "PIL", "numpy"):
            self.assertNotIn(mod, sys.modules)


class BuildL0Test(unittest.TestCase):
    """The L0 builder's configurations (pure: no torch). The parameter counts are pinned to what
    the real classes instantiate (diffusers 0.42.1, transformers 5.17.0); TinyPipelineTest checks
    the estimators against the built modules."""

    def test_transformer_is_qwen_image_20b(self):
        c = build_l0.transformer_config()
        for k, v in {"num_layers": 60, "num_attention_heads": 24, "attention_head_dim": 128,
                     "joint_attention_dim": 3584, "in_channels": 64, "out_channels": 16, "patch_size": 2,
                     "axes_dims_rope": [16, 56, 56], "guidance_embeds": False}.items():
            self.assertEqual(c[k], v, k)
        self.assertIs(c["zero_cond_t"], True, "2511 modulates the reference tokens with t=0")
        self.assertEqual(sum(c["axes_dims_rope"]), c["attention_head_dim"])
        self.assertFalse(c["use_additional_t_cond"] or c["use_layer3d_rope"], "those are Qwen-Image-Layered's")
        n = build_l0.estimate_transformer_params(c)
        self.assertEqual(n, 20_430_401_088)
        self.assertAlmostEqual(n / 1e9, 20.4, delta=0.1)

    def test_text_encoder_is_qwen25_vl_7b(self):
        c = build_l0.text_encoder_config()
        t, v = c["text_config"], c["vision_config"]
        for k, want in {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
                        "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
                        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}.items():
            self.assertEqual(t[k], want, k)
        head_dim = t["hidden_size"] // t["num_attention_heads"]
        self.assertEqual(sum(t["rope_scaling"]["mrope_section"]) * 2, head_dim)
        for k, want in {"depth": 32, "hidden_size": 1280, "num_heads": 16, "intermediate_size": 3420,
                        "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                        "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]}.items():
            self.assertEqual(v[k], want, k)
        self.assertEqual(v["out_hidden_size"], t["hidden_size"])
        self.assertEqual(t["hidden_size"], build_l0.transformer_config()["joint_attention_dim"])
        n = build_l0.estimate_text_encoder_params(c)
        self.assertEqual(n, 8_292_166_656)
        self.assertAlmostEqual(n / 1e9, 8.3, delta=0.1)

    def test_token_ids_are_the_real_ones(self):
        ids = build_l0.TOKEN_IDS
        for tok, want in {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                          "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|vision_pad|>": 151654,
                          "<|image_pad|>": 151655, "<|video_pad|>": 151656, "<|file_sep|>": 151664}.items():
            self.assertEqual(ids[tok], want, tok)
        self.assertEqual(sorted(ids.values()), list(range(151643, 151665)))
        c = build_l0.text_encoder_config()
        self.assertEqual((c["image_token_id"], c["video_token_id"], c["vision_start_token_id"], c["vision_end_token_id"]),
                         (151655, 151656, 151652, 151653))
        self.assertEqual((c["text_config"]["bos_token_id"], c["text_config"]["eos_token_id"]), (151643, 151645))
        self.assertLess(max(ids.values()), c["text_config"]["vocab_size"])
        self.assertLess(max(ids.values()), build_l0.text_encoder_config(tiny=True)["text_config"]["vocab_size"])

    def test_tokenizer_corpus_and_template(self):
        corpus = "".join(build_l0.tokenizer_corpus())
        for tok in build_l0.TOKEN_IDS:
            self.assertNotIn(tok, corpus, "special tokens are added tokens, never BPE-trained")
        t = build_l0.EDIT_TEMPLATE
        self.assertEqual(t.count("{}"), 1)
        self.assertTrue(t.startswith("<|im_start|>system\n") and t.endswith("<|im_start|>assistant\n"))
        self.assertEqual(build_l0.EDIT_TEMPLATE_START_IDX, 64)
        self.assertEqual(len(build_l0.bytes_to_unicode()), 256)
        self.assertEqual(len(set(build_l0.bytes_to_unicode())), 256)

    def test_vae(self):
        c = build_l0.vae_config()
        self.assertEqual((c["base_dim"], c["z_dim"], c["dim_mult"], c["num_res_blocks"], c["temperal_downsample"]),
                         (96, 16, [1, 2, 4, 4], 2, [False, True, True]))
        self.assertEqual((len(c["latents_mean"]), len(c["latents_std"])), (16, 16))
        self.assertEqual((c["latents_mean"][0], c["latents_std"][-1]), (-0.7571, 1.9160))
        self.assertEqual(build_l0.estimate_vae_params(c), 126_892_531)
        t = build_l0.transformer_config()
        self.assertEqual(t["in_channels"], c["z_dim"] * t["patch_size"] ** 2, "2x2-packed latents")
        self.assertEqual(t["out_channels"], c["z_dim"])
        self.assertEqual(2 ** len(c["temperal_downsample"]) * t["patch_size"], adapter.SIZE_MULTIPLE[0])

    def test_scheduler_processor_and_index(self):
        s = build_l0.scheduler_config()
        self.assertEqual((s["use_dynamic_shifting"], s["time_shift_type"], s["base_shift"], s["max_shift"],
                          s["base_image_seq_len"], s["max_image_seq_len"], s["shift_terminal"], s["shift"]),
                         (True, "exponential", 0.5, 0.9, 256, 8192, 0.02, 1.0))
        ip = build_l0.image_processor_config()
        self.assertEqual((ip["min_pixels"], ip["max_pixels"], ip["patch_size"], ip["merge_size"], ip["temporal_patch_size"]),
                         (56 * 56, 28 * 28 * 16384, 14, 2, 2))
        m = build_l0.model_index("0.42.1")
        self.assertEqual(m["_class_name"], "QwenImageEditPlusPipeline")
        self.assertEqual(sorted(k for k in m if not k.startswith("_")),
                         ["processor", "scheduler", "text_encoder", "tokenizer", "transformer", "vae"])
        self.assertEqual(m["text_encoder"], ["transformers", "Qwen2_5_VLForConditionalGeneration"])
        self.assertEqual(m["processor"], ["transformers", "Qwen2VLProcessor"])

    def test_bundle_is_the_inventory_rows(self):
        with open(os.path.join(HERE, "qwenimage.go")) as f:
            src = f.read()
        self.assertEqual(re.findall(r'Bundle: "([^"]+)"', src), [build_l0.BUNDLE])
        self.assertEqual(re.findall(r'ID: "([^"]+)"', src), [build_l0.CHECKPOINT])

    def test_tiny_is_consistent(self):
        p = build_l0.plan(tiny=True)
        t, te, v = p["transformer"], p["text_encoder"], p["vae"]
        self.assertEqual(t["joint_attention_dim"], te["text_config"]["hidden_size"])
        self.assertEqual(te["vision_config"]["out_hidden_size"], te["text_config"]["hidden_size"])
        self.assertEqual(sum(t["axes_dims_rope"]), t["attention_head_dim"])
        tc = te["text_config"]
        self.assertEqual(sum(tc["rope_scaling"]["mrope_section"]) * 2, tc["hidden_size"] // tc["num_attention_heads"])
        self.assertEqual(t["in_channels"], v["z_dim"] * 4)
        self.assertEqual(tc["vocab_size"], 152064, "the real token ids must exist")
        self.assertLess(sum(p["estimated_params"].values()), 25e6)

    def test_size_estimate(self):
        p = build_l0.plan()
        b = p["estimated_bytes"]
        self.assertEqual(b["transformer"], 2 * 20_430_401_088)
        self.assertEqual(b["text_encoder"], 2 * 8_292_166_656)
        self.assertAlmostEqual(p["estimated_total_bytes"] / 1e9, 57.7, delta=0.1)  # the real snapshot: 57.7 GB

    def test_dry_run_needs_no_torch(self):
        buf = io.StringIO()
        old, sys.stdout = sys.stdout, buf
        try:
            self.assertEqual(build_l0.main(["--out", "/x", "--dry-run"]), 0)
        finally:
            sys.stdout = old
        out = buf.getvalue()
        self.assertIn("/x/Qwen/Qwen-Image-Edit-2511", out)
        self.assertIn("57.71 GB", out)
        self.assertIn('"zero_cond_t": true', out)
        for mod in ("torch", "diffusers", "transformers", "tokenizers"):
            self.assertNotIn(mod, sys.modules)

    def test_marker(self):
        text = build_l0.marker_text(build_l0.plan(), 0, {"transformer": 1})
        self.assertIn("RANDOM weights", text)
        self.assertIn("Qwen/Qwen-Image-Edit-2511", text)
        self.assertIn("never", text.lower())
        self.assertIn("TINY", build_l0.marker_text(build_l0.plan(tiny=True), 0, {}))


# The tiny bundle TinyPipelineTest and CompiledEngineTest load, only ever read. adapter_test.go,
# which runs each class in a python process of its own, builds it once (build_tiny) and names
# its --out in TINY_ENV; without that variable it is built here, once for the process, into a
# temporary directory.
TINY_ENV = "MEDIAQUAL_QWENIMAGE_TINY"
TINY_REPORT = "build_l0.stdout"  # build_l0.py's stdout (its JSON report last), beside the bundle
_tiny = {}


def build_tiny(out):
    """build_l0.py --tiny --device cpu into the bundles root out, its stdout kept in out/TINY_REPORT."""
    built = subprocess.run([sys.executable, os.path.join(HERE, "build_l0.py"), "--tiny", "--device", "cpu", "--out", out],
                           check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    with open(os.path.join(out, TINY_REPORT), "w") as f:
        f.write(built.stdout)


def tiny_bundle():
    """The tiny bundle's directory and build_l0.py's JSON report of it."""
    if "bundle" not in _tiny:
        root = os.environ.get(TINY_ENV)
        if not root:
            root = tempfile.mkdtemp()
            try:
                build_tiny(root)
            except BaseException:
                shutil.rmtree(root, ignore_errors=True)
                raise
            _tiny["tmp"] = root
        report = os.path.join(root, TINY_REPORT)
        if not os.path.isfile(report):
            raise RuntimeError("%s=%s holds no tiny bundle built by build_tiny (no %s there): unset it to build one here"
                               % (TINY_ENV, root, TINY_REPORT))
        with open(report) as f:
            out = f.read()
        _tiny["bundle"] = os.path.join(root, build_l0.BUNDLE)
        _tiny["report"] = json.loads(out[out.index("\n{") + 1:])
    return _tiny["bundle"], _tiny["report"]


def tearDownModule():
    if "tmp" in _tiny:
        shutil.rmtree(_tiny["tmp"], ignore_errors=True)


@testing.needs("torch", "diffusers", "transformers", "accelerate", "numpy", "PIL", "torchvision")
class TinyPipelineTest(testing.RealWorkerTestCase):
    """The real path end to end, on CPU: build_l0.py --tiny writes a bundle, adapter.py (a
    subprocess, as mediaserve runs it) loads it with diffusers' QwenImageEditPlusPipeline and
    serves edits over the protocol. Everything heavy runs in subprocesses, so this process never
    imports torch. `make test` runs it in the CPU torch virtualenv (make torch); elsewhere a
    missing module makes it "not run", by name."""

    @classmethod
    def setUpClass(cls):
        cls.bundle, cls.report = tiny_bundle()
        cls.tmp = tempfile.mkdtemp()  # this class's own files: references, outputs
        cls.ref = os.path.join(cls.tmp, "ref.png")
        write_png(cls.ref, 40, 24, alpha=True)
        cls.start_worker([sys.executable, os.path.join(HERE, "adapter.py"), "--bundle", cls.bundle, "--device", "cpu"])
        cls.ready = json.loads(cls.proc.stdout.readline())

    def job(self, job_id, reference=True, **over):
        s = settings(size="48x32", num_inference_steps=2)
        s.update(over)
        return self.run_job(job_id, s, reference=self.ref if reference else None)

    def test_build_matches_the_plan(self):
        p = build_l0.plan(tiny=True)
        self.assertEqual(self.report["params"], p["estimated_params"], "estimators == instantiated modules")
        for name in ("transformer", "text_encoder", "vae", "tokenizer", "processor", "scheduler"):
            self.assertGreater(self.report["bytes"][name], 0, name)
        with open(os.path.join(self.bundle, "model_index.json")) as f:
            self.assertEqual({k: v for k, v in json.load(f).items() if k != "_diffusers_version"},
                             {k: v for k, v in build_l0.model_index("x").items() if k != "_diffusers_version"})
        with open(os.path.join(self.bundle, "transformer", "config.json")) as f:
            self.assertIs(json.load(f)["zero_cond_t"], True)
        with open(os.path.join(self.bundle, "L0-RANDOM.txt")) as f:
            self.assertIn("RANDOM weights", f.read())

    def test_pipeline_tokenizer_and_processor(self):
        """The loaded pipeline's template is the builder's, and the made tokenizer splits its
        system prefix into exactly the prompt_template_encode_start_idx tokens the pipeline drops,
        as the real Qwen2 tokenizer does, with the real special-token ids."""
        script = """
import json, sys, torch
from diffusers import QwenImageEditPlusPipeline
pipe = QwenImageEditPlusPipeline.from_pretrained(sys.argv[1], torch_dtype=torch.bfloat16)
prefix = pipe.prompt_template_encode.split("{}")[0]
out = {"template": pipe.prompt_template_encode, "start_idx": pipe.prompt_template_encode_start_idx,
       "prefix_tokens": [len(pipe.tokenizer(prefix)["input_ids"]), len(pipe.processor.tokenizer(prefix)["input_ids"])],
       "ids": {t: pipe.processor.tokenizer.convert_tokens_to_ids(t) for t in sys.argv[2:]},
       "processor_image_token_id": pipe.processor.image_token_id, "len": len(pipe.tokenizer),
       "dtypes": [str(m.dtype) for m in (pipe.transformer, pipe.text_encoder, pipe.vae)]}
print(json.dumps(out))
"""
        r = subprocess.run([sys.executable, "-c", script, self.bundle] + list(build_l0.TOKEN_IDS),
                           check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        got = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(got["template"], build_l0.EDIT_TEMPLATE)
        self.assertEqual(got["start_idx"], build_l0.EDIT_TEMPLATE_START_IDX)
        self.assertEqual(got["prefix_tokens"], [build_l0.EDIT_TEMPLATE_START_IDX] * 2)
        self.assertEqual(got["ids"], build_l0.TOKEN_IDS)
        self.assertEqual((got["processor_image_token_id"], got["len"]), (151655, 151665))
        self.assertEqual(got["dtypes"], ["torch.bfloat16"] * 3)

    def test_protocol_over_the_real_pipeline(self):
        self.assertEqual((self.ready["event"], self.ready["precision"], self.ready["weights"]), ("ready", "bf16", "L0-random"))
        ev, data, progress = self.job("a")
        self.assertEqual(ev["event"], "result", ev)
        self.assertEqual((ev["frames"], ev["width"], ev["height"]), (1, 48, 32))
        actual = dict(ev["actual"])
        parity = actual.pop("parity", None)
        self.assertEqual(actual, {"width": 48, "height": 32, "num_inference_steps": 2, "guidance": 4.0,
                                  "seed": 42, "precision": "bf16", "engine": "eager"})
        self.assertEqual(parity, self.ready.get("parity"), "every result carries the ready line's figures")
        self.assertEqual((parity["passed"], parity["served"], parity["rel_l2"]), (True, "is the reference", None),
                         "eager on one device is the reference itself: no figure against itself")
        self.assertGreater(parity["cond_fp32_reference"], 0.0, "the fp32 floor was measured")
        self.assertEqual(progress, [(1, 2), (2, 2)])
        self.assertEqual(len(data), 48 * 32 * 3)
        self.assertGreater(len(set(data)), 16, "a textured image, not a flat one")
        png = os.path.join(self.tmp, "a.png")  # the server's image_edit artifact is a PNG of these bytes
        write_png(png, 48, 32, pixels=data)
        decoded = read_png(png)
        self.assertEqual(b"".join(decoded["rows"]), data)
        _, again, _ = self.job("b")
        self.assertEqual(data, again, "same seed, same bytes")
        _, other, _ = self.job("c", seed=43)
        self.assertNotEqual(data, other)
        ev, _, progress = self.job("d", size="40x40")
        self.assertEqual((ev["event"], ev["code"], ev["param"], progress), ("error", "unsupported_value", "size", []))
        ev, _, _ = self.job("e", reference=False)
        self.assertEqual((ev["event"], ev["code"], ev["param"]), ("error", "invalid_request", "reference"))
        ev, _, progress = self.job("e1", num_inference_steps=1)  # the real scheduler would give a NaN image
        self.assertEqual((ev["event"], ev["code"], ev["param"], progress), ("error", "unsupported_value", "num_inference_steps", []))
        # No negative prompt (the pinned " " goes in) and guidance 1, which turns true CFG off.
        ev, data, _ = self.job("f", size="32x48", guidance=1, negative_prompt=None)
        self.assertEqual((ev["event"], ev["width"], ev["height"], len(data)), ("result", 32, 48, 32 * 48 * 3), ev)
        self.assertEqual(ev["actual"]["guidance"], 1.0)
        self.send({"op": "run", "id": "g", "settings": settings(size="48x32", num_inference_steps=500),
                   "reference": self.ref, "output": os.path.join(self.tmp, "g.rgb")})
        first = json.loads(self.proc.stdout.readline())
        self.assertEqual((first["event"], first["done"]), ("progress", 1))
        self.send({"op": "cancel", "id": "g"})
        while True:
            ev = json.loads(self.proc.stdout.readline())
            if ev["event"] != "progress":
                break
        self.assertEqual((ev["event"], ev["code"]), ("error", "cancelled"))
        _, after, _ = self.job("h")
        self.assertEqual(after, again, "a cancelled job leaves no trace in the next")
        self.proc.stdin.close()
        self.assertEqual(self.proc.wait(30), 0)


@testing.needs("torch", "diffusers", "transformers", "accelerate", "numpy", "PIL", "torchvision")
class CompiledEngineTest(testing.RealWorkerTestCase):
    """--engine regional-compile on the tiny pipeline, on CPU (inductor): the block compiles in
    the warm-up before "ready", whose true CFG has prompts of two lengths; then jobs with
    prompts of other lengths and a reference of the warm-up's aspect ratio run, report the
    engine and repeat their bytes; a reference of another aspect ratio runs eagerly, and the
    warm-up's shape keeps its bytes after it."""

    @classmethod
    def setUpClass(cls):
        bundle, _ = tiny_bundle()
        cls.tmp = tempfile.mkdtemp()  # this class's own files: reference, log, outputs
        cls.ref = os.path.join(cls.tmp, "ref.png")
        write_png(cls.ref, 96, 64)  # 3:2, as the 48x32 warm-up
        cls.log = open(os.path.join(cls.tmp, "worker.log"), "w+")
        cls.start_worker([sys.executable, os.path.join(HERE, "adapter.py"), "--bundle", bundle,
                          "--device", "cpu", "--engine", "regional-compile", "--warmup-size", "48x32"], stderr=cls.log)

    @classmethod
    def tearDownClass(cls):
        cls.log.close()
        super().tearDownClass()

    def job(self, job_id, **over):
        s = settings(size="48x32", num_inference_steps=2)
        s.update(over)
        return self.run_job(job_id, s, reference=self.ref)

    def test_compiled_jobs(self):
        ready = self.recv()
        self.assertEqual(ready["event"], "ready", ready)
        ev, data, _ = self.job("a")
        self.assertEqual((ev["event"], ev["actual"]["engine"]), ("result", "regional-compile"), ev)
        _, again, _ = self.job("b")
        self.assertEqual(data, again, "the compiled engine repeats its bytes")
        ev, other, _ = self.job("c", prompt="turn the whole picture into a watercolour painting of a cat")
        self.assertEqual(ev["event"], "result", ev)
        self.assertNotEqual(data, other)
        # A reference of another aspect ratio gives other shapes: that job runs eagerly, nothing
        # compiles inside it (keep_compiled_shapes), and the warm-up's shape keeps its bytes after.
        square = os.path.join(self.tmp, "square.png")
        write_png(square, 64, 64)
        ev, _, _ = self.run_job("d", settings(size="48x32", num_inference_steps=2), reference=square)
        self.assertEqual(ev["event"], "result", ev)
        _, after, _ = self.job("e")
        self.assertEqual(data, after, "the pinned shape's bytes after another shape was served")
        self.proc.stdin.close()
        self.assertEqual(self.proc.wait(60), 0)
        self.log.seek(0)
        log = self.log.read()
        self.assertIn("compiled shapes kept", log)
        compiled = re.findall(r"job (\w+): during the Task the engine compiled [1-9]", log)
        self.assertEqual(compiled, [], "no job compiled: the other shape ran eagerly")


if __name__ == "__main__":
    unittest.main()
