#!/usr/bin/env python3
"""Wan family native Task adapter: a mediaserve worker (docs/WORKER.md).

One long-lived process per lane. It loads a diffusers WanPipeline from a bundle (a Hugging Face
diffusers snapshot: model_index.json, transformer/, vae/, text_encoder/, tokenizer/, scheduler/)
once, says "ready", then runs one job at a time from JSON lines on stdin and answers on stdout:
progress events, then exactly one result (with the frames written as raw rgb24 to the job's
output file) or error. stdout carries the protocol only; everything else goes to stderr.

Configuration (argv wins over the environment):
  --bundle DIR          the snapshot directory; else $MEDIAQUAL_BUNDLE; else
                        $MEDIAQUAL_BUNDLES/<--bundle-name>
  --bundle-name NAME    the row's bundle, e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers
  --flow-shift F        the checkpoint's pinned UniPC flow_shift (3.0 Wan2.1, 5.0 Wan2.2 TI2V)
  --device DEV          default $MEDIAQUAL_WAN_DEVICE or cuda:0 (with CUDA_VISIBLE_DEVICES set,
                        cuda:0 is the first listed GPU); "cpu" works for tiny bundles
  --warmup-steps N      before "ready", run one N-step generation so that CUDA/cuBLAS set-up (and
                        compilation) is not inside the first timed job (0: off; at least 2 with
                        a compiling engine)
  --warmup-size WxH, --warmup-frames N
                        the warm-up's shape: the row's pinned one, so a compiled transformer is
                        specialised for it (default: the smallest legal shape)
  --engine E            eager (default) or regional-compile: torch.compile of the transformer's
                        repeated block (diffusers' compile_repeated_blocks), done before "ready"
  --layout L            single (default), cfg-2 or ulysses-N: the Task on N GPUs of
                        CUDA_VISIBLE_DEVICES as N ranks (models/pyworker/ranks.py)
Precision is pinned: transformer and text encoder bf16, VAE fp32.

Settings map to WanPipeline.__call__ exactly; nothing is clamped or rounded: a num_frames that is
not 4k+1, or a size that is not a multiple of the VAE x patch stride, is answered with an error
event where diffusers would silently round it.

torch and diffusers are imported only in DiffusersBackend (at load), so the mapping, reporting,
rgb24 conversion and the protocol loop are importable and testable without them
(models/wan/test_adapter.py). The protocol loop, the rgb24 output and the device half of the
backend are the family-independent models/pyworker/worker.py; this file is Wan's mapping,
report and pipeline loading.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import worker as pw  # noqa: E402
from pyworker.worker import JobError, parse_size  # noqa: E402

PRECISION = "bf16"
FRAME_STEP = 4  # Wan's VAE compresses time 4x: num_frames must be 4k+1

log = pw.logger("wan-adapter")


# --------------------------------------------------------------------------------------------
# Request mapping (pure)


def check_frames(num_frames, step=FRAME_STEP):
    """Wan's frame rule: step*k + 1. diffusers rounds other counts down with a warning; we refuse."""
    if num_frames < 1 or (num_frames - 1) % step != 0:
        lower = (num_frames - 1) // step * step + 1 if num_frames > 1 else 1
        raise JobError(
            "unsupported_value",
            "num_frames %d is not %dk+1 (Wan's VAE needs %dk+1 frames; diffusers would silently "
            "produce %d); nearest allowed: %d or %d" % (num_frames, step, step, lower, lower, lower + step),
            "num_frames",
        )


def pipeline_kwargs(settings, generator_for, frame_step=FRAME_STEP, size_multiple=(16, 16)):
    """Map spec.Settings (as sent in a run op) to WanPipeline.__call__ keyword arguments.

    generator_for(seed) builds the torch.Generator (torch.Generator(device).manual_seed(seed) in
    the real backend). size_multiple is (height, width) granularity: VAE spatial factor x patch.
    Raises JobError for anything the pipeline would otherwise adjust silently.
    """
    settings = pw.settings_object(settings)
    prompt = pw.prompt_setting(settings)
    negative = pw.negative_setting(settings, "")
    width, height = parse_size(settings.get("size"))
    pw.check_size_multiple(width, height, size_multiple)
    num_frames = pw.int_setting(settings, "num_frames")
    check_frames(num_frames, frame_step)
    pw.int_setting(settings, "fps", minimum=1)  # needed for the report; not a pipeline argument
    steps = pw.int_setting(settings, "num_inference_steps", minimum=1)
    guidance = pw.guidance_setting(settings)
    seed = pw.int_setting(settings, "seed")
    return {
        "prompt": prompt,
        # Omitted means empty: no hidden default (not the upstream Chinese negative prompt).
        "negative_prompt": negative,
        "height": height,
        "width": width,
        "num_frames": num_frames,
        "num_inference_steps": steps,
        "guidance_scale": guidance,
        "generator": generator_for(seed),
        # Tensors stay on the device: the backend quantizes them there (pyworker to_rgb24).
        "output_type": "pt",
    }


def actual_for(settings, frames, width, height, steps_done):
    """spec.Actual of what was produced. fps is a container property (Wan makes frames), so it is
    the asked fps; duration_s = frames / fps."""
    fps = settings["fps"]
    return {
        "num_frames": frames,
        "width": width,
        "height": height,
        "fps": fps,
        "duration_s": frames / fps,
        "num_inference_steps": steps_done,
        "guidance": float(settings["guidance"]),
        "seed": settings["seed"],
        "precision": PRECISION,
    }


# --------------------------------------------------------------------------------------------
# The real backend (torch + diffusers, imported lazily)


class Config:
    def __init__(self, bundle, flow_shift, device="cuda:0", warmup_steps=0, engine="eager", warmup_size=None, warmup_frames=None,
                 layout=None):
        self.bundle = bundle
        self.flow_shift = float(flow_shift)
        self.device = device
        self.warmup_steps = warmup_steps
        self.engine = engine
        self.warmup_size = warmup_size
        self.warmup_frames = warmup_frames
        self.layout = layout


class DiffusersBackend(pw.TorchBackend):
    """WanPipeline on one device: bf16 transformer and text encoder, fp32 VAE, UniPC flow_shift."""

    precision = PRECISION
    fused_module = "wan.fused"
    rope = ("rope", 1)  # WanRotaryPosEmbed: (cos, sin), each (1, tokens, 1, head_dim)
    log = staticmethod(log)

    def __init__(self, cfg):
        self.cfg = cfg
        bundle = cfg.bundle
        pw.require_bundle(bundle)
        torch = self.setup(cfg.device)
        from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline

        log("loading %s on %s (CUDA_VISIBLE_DEVICES=%r), flow_shift %g" % (
            bundle, self.device, os.environ.get("CUDA_VISIBLE_DEVICES"), cfg.flow_shift))
        t0 = time.perf_counter()
        vae = AutoencoderKLWan.from_pretrained(bundle, subfolder="vae", torch_dtype=torch.float32)
        pipe = WanPipeline.from_pretrained(bundle, vae=vae, torch_dtype=torch.bfloat16)
        # Explicit flow-matching UniPC, whatever scheduler the snapshot carries.
        pipe.scheduler = UniPCMultistepScheduler.from_config(
            pipe.scheduler.config, prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=cfg.flow_shift
        )
        pipe.to(self.device)
        pipe.set_progress_bar_config(disable=True)
        if pipe.transformer is None:
            raise RuntimeError("bundle has no transformer")
        got = {
            "transformer": pipe.transformer.dtype,
            "text_encoder": pipe.text_encoder.dtype,
            "vae": pipe.vae.dtype,
        }
        want = {"transformer": torch.bfloat16, "text_encoder": torch.bfloat16, "vae": torch.float32}
        if got != want:
            raise RuntimeError("precision not as pinned: got %s, want %s" % (got, want))
        self.pipe = pipe
        patch = pipe.transformer.config.patch_size
        spatial = pipe.vae_scale_factor_spatial
        self.size_multiple = (spatial * patch[1], spatial * patch[2])
        self.frame_step = pipe.vae_scale_factor_temporal
        log("loaded in %.1f s: size multiple %s, frames %dk+1%s" % (
            time.perf_counter() - t0, self.size_multiple, self.frame_step, self.note_weights(bundle)))
        self.instrument(pipe)
        self.stream_decode(pipe.vae)
        self.prepare(pipe, cfg.layout, cfg.engine, max(cfg.warmup_steps, 2 if cfg.engine != "eager" else 0))

    def stream_decode(self, vae):
        """Streams the clip while the VAE decodes it: AutoencoderKLWan._decode calls its decoder
        once a latent frame (1 frame, then 4 each), and each chunk goes to the job's frame
        stream post-processed as WanPipeline does after the decode (unpatchify where the VAE
        patches, the clamp to [-1, 1], VideoProcessor's denormalize). All three work frame by
        frame, so a chunk gets the bytes its frames get in the whole clip; to_rgb24 checks that
        on the device before the result. Tiled decoding calls the decoder per tile: no stream."""
        from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

        decoder = vae.decoder
        forward = decoder.forward
        patch = vae.config.patch_size

        def streamed(*args, **kwargs):
            out = forward(*args, **kwargs)
            if self.stream is not None and not vae.use_tiling:
                x = out if patch is None else unpatchify(out, patch_size=patch)
                x = (x.clamp(-1.0, 1.0) * 0.5 + 0.5).clamp(0, 1)
                self.stream_frames(x[0].permute(1, 0, 2, 3))  # (C, F, H, W) -> (F, C, H, W)
            return out

        decoder.forward = streamed

    def warmup_kwargs(self, steps):
        """The warm-up's call (and parity's step): the row's pinned shape (default the smallest
        legal one), guidance 5, so both branches run; a prompt of words the L0 tokenizer knows, so
        that the branches differ there too (parity sees a guidance branch lost or duplicated)."""
        h, w = self.size_multiple
        width, height = parse_size(self.cfg.warmup_size) if self.cfg.warmup_size else (w * 2, h * 2)
        frames = self.cfg.warmup_frames or self.frame_step + 1
        return dict(prompt="a red fox runs through the snow at night", height=height, width=width, num_frames=frames, num_inference_steps=steps,
                    guidance_scale=5.0, output_type="pt", generator=self.generator(0))

    @staticmethod
    def both_branches(kwargs):
        return kwargs["guidance_scale"] > 1.0  # WanPipeline runs the uncond branch exactly then

    def call(self, kwargs):
        """The native generation call; returns frames (F, H, W, 3) uint8, made on the device."""
        with self.torch.inference_mode():
            out = self.run_pipe(**kwargs)
            return self.to_rgb24(out.frames[0])


# --------------------------------------------------------------------------------------------
# Protocol (models/pyworker/worker.py)


def _kwargs_for(backend, settings, reference_path):
    # Text-to-video: a reference, if any, is not used.
    return pipeline_kwargs(settings, backend.generator, backend.frame_step, backend.size_multiple)


def _actual(settings, shape, steps_done):
    frames, height, width, _ = shape
    return actual_for(settings, frames, width, height, steps_done)


class Worker(pw.Worker):
    """The docs/WORKER.md loop around a Wan backend.

    load() -> backend; the backend has: precision, size_multiple, frame_step, generator(seed),
    call(kwargs) -> frames, synchronize(), reset_peak(), peak_memory_mb(), is_oom(exc), recover(),
    and optionally ready_info().
    """

    def __init__(self, out, load, clock=time.perf_counter):
        super().__init__(out, pw.PipelineFamily(load, _kwargs_for, _actual, clock), log)


# --------------------------------------------------------------------------------------------
# Entry point


def parse_args(argv, env):
    p = argparse.ArgumentParser(description="Wan WanPipeline worker for mediaserve (docs/WORKER.md)")
    p.add_argument("--bundle", help="diffusers snapshot directory (else $MEDIAQUAL_BUNDLE)")
    p.add_argument("--bundle-name", help="bundle under $MEDIAQUAL_BUNDLES, e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
    p.add_argument("--flow-shift", type=float, required=True, help="UniPC flow_shift pinned for the checkpoint")
    p.add_argument("--device", default=env.get("MEDIAQUAL_WAN_DEVICE", "cuda:0"))
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--warmup-size", help="the warm-up's WxH (the row's pinned size)")
    p.add_argument("--warmup-frames", type=int, help="the warm-up's num_frames (the row's pinned count)")
    p.add_argument("--engine", choices=pw.ENGINES, default="eager")
    p.add_argument("--layout", type=pw.layout_arg, help="single, cfg-2 or ulysses-N (default: one GPU, not reported)")
    args = p.parse_args(argv)
    return Config(pw.resolve_bundle(args, env), args.flow_shift, pw.rank_device(args.device, args.layout, env),
                  args.warmup_steps, args.engine, args.warmup_size, args.warmup_frames, args.layout)


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv, os.environ)
    pw.main(lambda proto: Worker(proto, lambda: DiffusersBackend(cfg)), cfg.layout, cfg.device != "cpu")


if __name__ == "__main__":
    main()
