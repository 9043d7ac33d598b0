"""Tests of the Qwen-Image-Edit adapter that need no torch, diffusers, numpy or Pillow.

Run from the repository root or from models/qwenimage:  python3 -m unittest -v test_adapter
(models/qwenimage/adapter_test.go runs it under `go test ./...`).
"""

import io
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import adapter  # noqa: E402

sys.path.insert(0, os.path.dirname(HERE))  # models/
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
            "output_type": "np",
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


class FakePipe:
    """Stands in for QwenImageEditPlusPipeline: one callback per step, then one image whose
    pixels depend on the reference's colour and the seed."""

    def __init__(self, step_delay=0.0):
        self.calls = []
        self.step_delay = step_delay
        self._interrupt = False

    def __call__(self, **kw):
        self.calls.append(kw)
        self._interrupt = False
        for i in range(kw["num_inference_steps"]):
            if self._interrupt:
                continue
            time.sleep(self.step_delay)
            kw["callback_on_step_end"](self, i, 1000 - i, {})
        ref = kw["image"][0]
        r = ref["rows"][0][0] / 255
        _, seed = kw["generator"]
        h, w = kw["height"], kw["width"]
        return [[[[r, (seed % 7) / 6, x / max(w - 1, 1)] for x in range(w)] for _ in range(h)]]


class FakeBackend:
    precision = "bf16"
    size_multiple = (16, 16)

    def __init__(self, pipe):
        self.pipe = pipe
        self.events = []

    def open_reference(self, path):
        return read_png(path)

    def generator(self, seed):
        return ("generator", seed)

    def call(self, kwargs):
        self.events.append("call")
        return self.pipe(**kwargs)

    def synchronize(self):
        self.events.append("sync")

    def reset_peak(self):
        self.events.append("reset_peak")

    def peak_memory_mb(self):
        return 58000.25

    def is_oom(self, exc):
        return "out of memory" in str(exc)

    def recover(self):
        self.events.append("recover")


class ProtocolTest(WorkerTestCase):
    adapter = adapter
    fake_pipe = FakePipe
    fake_backend = FakeBackend

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
        self.inp.send({"op": "run", "id": "ok", "settings": settings(size="16x16", num_inference_steps=1),
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
            self.inp.send({"op": "run", "id": "j%d" % i, "settings": settings(size="16x16", num_inference_steps=1, seed=seed),
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

    def test_out_of_memory(self):
        class OOMPipe(FakePipe):
            def __call__(self, **kw):
                raise RuntimeError("CUDA out of memory. Tried to allocate 8 GiB")

        self.start(pipe=OOMPipe())
        self.out.next_event()
        self.inp.send({"op": "run", "id": "m", "settings": settings(size="16x16"), "reference": self.reference(), "output": self.path("m.rgb")})
        err, _ = self.until("error", "m")
        self.assertEqual(err["code"], "out_of_memory")
        self.assertIn("recover", self.backend.events)
        self.stop()

    def test_load_failure_is_fatal(self):
        def load():
            raise RuntimeError("no diffusers bundle at '/nowhere'")

        self.start(load=load)
        ev = self.out.next_event()
        self.assertEqual(ev["event"], "fatal")
        self.assertIn("/nowhere", ev["message"])
        self.thread.join(5)
        self.assertEqual(self.rc, [1])


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

    def test_missing_bundle_fails_before_importing_torch(self):
        with self.assertRaises(RuntimeError) as cm:
            adapter.DiffusersBackend(adapter.Config(os.path.join(tempfile.gettempdir(), "no-such-bundle")))
        self.assertIn("model_index.json", str(cm.exception))

    def test_module_imports_no_torch(self):
        for mod in ("torch", "diffusers", "PIL", "numpy"):
            self.assertNotIn(mod, sys.modules)


if __name__ == "__main__":
    unittest.main()
