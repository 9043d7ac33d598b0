#!/usr/bin/env python3
"""Qwen-Image-Edit family native Task adapter: a mediaserve worker (docs/WORKER.md).

One long-lived process per lane. It loads a diffusers QwenImageEditPlusPipeline from a bundle (a
Hugging Face diffusers snapshot: model_index.json, transformer/, vae/, text_encoder/, tokenizer/,
processor/, scheduler/) once in bf16, says "ready", then edits one reference image per job. The
protocol loop, the rgb24 output and the device half of the backend are the family-independent
models/pyworker/worker.py; this file is the family's mapping, report and pipeline loading.

Configuration (argv wins over the environment):
  --bundle DIR          the snapshot directory; else $MEDIAQUAL_BUNDLE; else
                        $MEDIAQUAL_BUNDLES/<--bundle-name>
  --bundle-name NAME    the row's bundle, e.g. Qwen/Qwen-Image-Edit-2511
  --device DEV          default $MEDIAQUAL_QWENIMAGE_DEVICE or cuda:0
  --layout L            single (default), cfg-2 or ulysses-N: the Task on N GPUs of
                        CUDA_VISIBLE_DEVICES as N ranks (models/pyworker/ranks.py)
  --engine E            eager (default), regional-compile (torch.compile of the transformer's
                        repeated block, compiled before "ready" by a 2-step warm-up edit) or
                        regional-compile-fused (the row's: that, with fused.py's kernels in the
                        block). Not for this family: the -graphs engines (its transformer copies a
                        host list to the device inside its forward, which a CUDA graph capture
                        cannot record; not tried on a GPU)
  --warmup-size WxH     that warm-up's size (the row's pinned one; default 1024x1024), with a
                        grey square reference

Settings map to QwenImageEditPlusPipeline.__call__: image=[reference], prompt, negative_prompt
(omitted -> the pinned " ", which keeps true CFG on), true_cfg_scale=guidance, guidance_scale=1.0,
num_inference_steps, height/width from size, a seeded generator, num_images_per_prompt=1,
output_type="pt" (quantized on the device). A size that is not a multiple of 16 (VAE 8x times patch 2) is answered with an
error event where diffusers would silently crop it, and so is num_inference_steps 1, for which the
snapshot's scheduler (shift_terminal 0.02) computes a NaN sigma and diffusers a NaN image.

The ready line says "weights": "L0-random" when the bundle carries models/qwenimage/build_l0.py's
L0-RANDOM.txt marker (random weights: mechanics, timing and shapes only), else "bundle".

torch, diffusers and Pillow are imported only in DiffusersBackend (at load; transformers'
Qwen2VLProcessor also needs torchvision), so the mapping, report and protocol loop are testable
without them (models/qwenimage/test_adapter.py).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import worker as pw  # noqa: E402
from pyworker.worker import JobError  # noqa: E402

PRECISION = "bf16"
NEGATIVE_DEFAULT = " "  # the row's pinned negative prompt: true CFG needs one
SIZE_MULTIPLE = (16, 16)  # (height, width): VAE spatial 8x times transformer patch 2
MIN_STEPS = 2  # one step gives NaN sigmas with the snapshot's scheduler (see pipeline_kwargs)
WARMUP_SIZE = "1024x1024"  # the row's pinned size (the row passes it): a compiled engine's warm-up

log = pw.logger("qwenimage-adapter")


# --------------------------------------------------------------------------------------------
# Request mapping (pure)


def pipeline_kwargs(settings, image, generator_for, size_multiple=SIZE_MULTIPLE):
    """Map spec.Settings (as sent in a run op) and the reference image to
    QwenImageEditPlusPipeline.__call__ keyword arguments.

    generator_for(seed) builds the torch.Generator. Raises JobError for anything the pipeline
    would otherwise adjust silently, and for video settings (image_edit has none).
    """
    settings = pw.settings_object(settings)
    prompt = pw.prompt_setting(settings)
    negative = pw.negative_setting(settings, NEGATIVE_DEFAULT)
    width, height = pw.parse_size(settings.get("size"))
    pw.check_size_multiple(width, height, size_multiple)
    for key in ("num_frames", "fps"):
        if settings.get(key) not in (None, 0):
            raise JobError("invalid_request", "image_edit takes no %s, got %r" % (key, settings[key]), key)
    steps = pw.int_setting(settings, "num_inference_steps", minimum=1)
    if steps < MIN_STEPS:
        # The pipeline asks for sigmas linspace(1, 1/N, N); the scheduler's shift_terminal (0.02)
        # stretch then divides by 1 - sigma_last, which is 0 for N = 1: a NaN sigma, a NaN image.
        raise JobError(
            "unsupported_value",
            "num_inference_steps must be at least %d, got %d (with one step Qwen-Image's scheduler, shift_terminal "
            "0.02, computes 0/0 sigmas and diffusers returns a NaN image)" % (MIN_STEPS, steps),
            "num_inference_steps",
        )
    guidance = pw.guidance_setting(settings)
    seed = pw.int_setting(settings, "seed")
    return {
        "image": [image],
        "prompt": prompt,
        "negative_prompt": negative,
        # Qwen-Image's CFG is "true CFG" (two passes), driven by true_cfg_scale; guidance_scale
        # is the distilled-guidance embedding, which this transformer does not use.
        "true_cfg_scale": guidance,
        "guidance_scale": 1.0,
        "num_inference_steps": steps,
        "height": height,
        "width": width,
        "generator": generator_for(seed),
        "num_images_per_prompt": 1,
        "output_type": "pt",  # quantized on the device (pyworker to_rgb24)
    }


def actual_for(settings, width, height, steps_done):
    """spec.Actual of an edited image: no frames, fps or duration."""
    return {
        "width": width,
        "height": height,
        "num_inference_steps": steps_done,
        "guidance": float(settings["guidance"]),
        "seed": settings["seed"],
        "precision": PRECISION,
    }


def _kwargs_for(backend, settings, reference_path):
    if reference_path is None:
        raise JobError("invalid_request", "image_edit run has no reference", "reference")
    try:
        image = backend.open_reference(reference_path)
    except OSError as e:  # missing, unreadable or not an image (PIL.UnidentifiedImageError is one)
        raise JobError("invalid_request", "cannot read the reference %r: %s" % (reference_path, e), "reference")
    return pipeline_kwargs(settings, image, backend.generator, backend.size_multiple)


def _actual(settings, shape, steps_done):
    frames, height, width, _ = shape
    if frames != 1:
        raise JobError("bad_pipeline_output", "expected one image, got %d" % frames)
    return actual_for(settings, width, height, steps_done)


class Worker(pw.Worker):
    """The docs/WORKER.md loop around a Qwen-Image-Edit backend.

    load() -> backend; the backend has: precision, size_multiple, open_reference(path) -> image,
    generator(seed), call(kwargs) -> (1, H, W, 3) in [0, 1], synchronize(), reset_peak(),
    peak_memory_mb(), is_oom(exc), recover(), and optionally ready_info() (extra "ready" fields:
    the real backend says whether the bundle's weights are L0-random).
    """

    def __init__(self, out, load, clock=time.perf_counter):
        super().__init__(out, pw.PipelineFamily(load, _kwargs_for, _actual, clock), log)


# --------------------------------------------------------------------------------------------
# The real backend (torch + diffusers + Pillow, imported lazily)


class Config:
    def __init__(self, bundle, device="cuda:0", layout=None, engine="eager", warmup_size=WARMUP_SIZE):
        self.bundle = bundle
        self.device = device
        self.layout = layout
        self.engine = engine
        self.warmup_size = warmup_size


class DiffusersBackend(pw.TorchBackend):
    """QwenImageEditPlusPipeline on one device, all components bf16."""

    precision = PRECISION
    size_multiple = SIZE_MULTIPLE
    fused_module = "qwenimage.fused"
    rope = ("pos_embed", 0)  # QwenEmbedRope: (image, text) complex tables, each (tokens, head_dim / 2)
    # On the H200 the load failed inside the capture ("Cannot copy between CPU and CUDA tensors
    # during CUDA graph capture unless the CPU tensor is pinned"). Read in diffusers 0.42.1:
    # QwenImageTransformer2DModel.forward builds tensors from host values on every call
    # (zero_cond_t's modulate_index, torch.tensor of a Python list on the device). At 580 ms a
    # step the launches a graph would save do not matter; the row's engine is
    # regional-compile-fused.
    no_graphs = ("Qwen-Image's transformer copies host values to the device inside its forward "
                 "(diffusers' modulate_index, for one), which a CUDA graph cannot record")
    log = staticmethod(log)

    def __init__(self, cfg):
        self.check_engine(cfg.engine)
        self.cfg = cfg
        bundle = cfg.bundle
        pw.require_bundle(bundle)
        # transformers 5's Qwen2VLProcessor (the bundle's processor/) cannot be built without its
        # video processor, and that (like its image processor) needs torchvision: without it
        # from_pretrained fails only once it reaches processor/. Say so before loading anything.
        torch = self.setup(cfg.device, needs=[("torchvision", "transformers' Qwen2VLProcessor needs it")])
        from diffusers import QwenImageEditPlusPipeline

        log("loading %s on %s (CUDA_VISIBLE_DEVICES=%r)" % (bundle, self.device, os.environ.get("CUDA_VISIBLE_DEVICES")))
        t0 = time.perf_counter()
        pipe = QwenImageEditPlusPipeline.from_pretrained(bundle, torch_dtype=torch.bfloat16)
        pipe.to(self.device)
        pipe.set_progress_bar_config(disable=True)
        got = {"transformer": pipe.transformer.dtype, "text_encoder": pipe.text_encoder.dtype, "vae": pipe.vae.dtype}
        want = dict.fromkeys(got, torch.bfloat16)
        if got != want:
            raise RuntimeError("precision not as pinned: got %s, want %s" % (got, want))
        multiple = pipe.vae_scale_factor * 2
        if (multiple, multiple) != self.size_multiple:
            raise RuntimeError("the pipeline's size multiple is %d, the adapter assumes %s" % (multiple, self.size_multiple))
        self.pipe = pipe
        self.instrument(pipe)
        log("loaded in %.1f s%s" % (time.perf_counter() - t0, self.note_weights(bundle)))
        self.prepare(pipe, cfg.layout, cfg.engine, 2 if cfg.engine != "eager" else 0)

    def warmup_kwargs(self, steps):
        """The warm-up's call (and parity's step): an edit at the warm-up size, mapped as a job
        is, with true CFG on. A compiled engine compiles in it, before "ready": the prompt's and
        the negative prompt's token counts differ, so the block is compiled for a varying text
        length too (dynamo's automatic dynamic shapes) and later prompts of other lengths do
        not compile inside a timed job. A reference of another aspect ratio than the warm-up's
        square still does."""
        from PIL import Image

        size = self.cfg.warmup_size
        width, height = pw.parse_size(size)
        return pipeline_kwargs({"prompt": "warm up the compiled blocks", "size": size, "num_inference_steps": steps,
                                "guidance": 4.0, "seed": 0}, Image.new("RGB", (width, height), (128, 128, 128)),
                               self.generator, self.size_multiple)

    @staticmethod
    def both_branches(kwargs):
        return kwargs["true_cfg_scale"] > 1 and kwargs.get("negative_prompt") is not None

    def open_reference(self, ref):
        return pw.open_reference(ref)

    def call(self, kwargs):
        """The native generation call; returns the image as (1, H, W, 3) uint8, made on the
        device."""
        with self.torch.inference_mode():
            out = self.run_pipe(**kwargs)
            return self.to_rgb24(out.images[:1])  # output_type="pt": (num_images, 3, H, W)


# --------------------------------------------------------------------------------------------
# Entry point


def parse_args(argv, env):
    p = argparse.ArgumentParser(description="Qwen-Image-Edit QwenImageEditPlusPipeline worker for mediaserve (docs/WORKER.md)")
    p.add_argument("--bundle", help="diffusers snapshot directory (else $MEDIAQUAL_BUNDLE)")
    p.add_argument("--bundle-name", help="bundle under $MEDIAQUAL_BUNDLES, e.g. Qwen/Qwen-Image-Edit-2511")
    p.add_argument("--device", default=env.get("MEDIAQUAL_QWENIMAGE_DEVICE", "cuda:0"))
    p.add_argument("--layout", type=pw.layout_arg, help="single, cfg-2 or ulysses-N (default: one GPU, not reported)")
    p.add_argument("--engine", choices=pw.ENGINES, default="eager")
    p.add_argument("--warmup-size", default=WARMUP_SIZE, help="WxH of the compiling engine's warm-up")
    args = p.parse_args(argv)
    return Config(pw.resolve_bundle(args, env), pw.rank_device(args.device, args.layout, env), args.layout, args.engine,
                  args.warmup_size)


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv, os.environ)
    pw.main(lambda proto: Worker(proto, lambda: DiffusersBackend(cfg)), cfg.layout, cfg.device != "cpu")


if __name__ == "__main__":
    main()
