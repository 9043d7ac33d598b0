#!/usr/bin/env python3
"""MiniMax-H3 native Task adapter: a mediaserve worker (docs/WORKER.md).

One long-lived process per lane. It loads diffusers' MiniMaxH3ModularPipeline (MiniMax-H3 is
modular only: there is no DiffusionPipeline for it) from a bundle, a local Hugging Face snapshot
with modular_model_index.json, transformer/, text_encoder/ (Qwen3-VL), tokenizer/, processor/,
vae/, audio_vae/, scheduler/, audio_scheduler/ (the released repository also holds
transformer_ref/, which only the ref2va workflow uses and which is never loaded here). It says
"ready", then runs one text-to-video job at a time. The protocol loop, the rgb24 output and the
device half of the backend are the family-independent models/pyworker/worker.py; this file is
MiniMax-H3's mapping, report and pipeline loading.

Configuration (argv wins over the environment):
  --bundle DIR          the snapshot directory; else $MEDIAQUAL_BUNDLE; else
                        $MEDIAQUAL_BUNDLES/<--bundle-name>
  --bundle-name NAME    the row's bundle, MiniMaxAI/MiniMax-H3
  --device DEV          default $MEDIAQUAL_MINIMAX_DEVICE or cuda:0
  --offload MODE        "auto" (default): diffusers' ComponentsManager auto CPU offload, every
                        model kept on the CPU and moved to DEV for its forward, others evicted as
                        memory requires (the weights do not fit one GPU at once); for an
                        in-memory L0 bundle (below) "auto" is "text-encoder"; "text-encoder":
                        every model resident on DEV except the text encoder, which lives on the
                        CPU and is copied to DEV for the prompt encoding and dropped from it right
                        after; "none": the whole pipeline on DEV (tiny bundles, and "cpu")
  --warmup-steps N      before "ready", one N-step generation at the smallest legal shape (0: off)
  --warmup-size WxH, --warmup-frames N
                        the row's pinned shape, at which parity before ready (pyworker/parity.py)
                        runs its step (default the smallest legal one)
  --layout L            single (default) or ulysses-N: the transformer over N GPUs of
                        CUDA_VISIBLE_DEVICES as N ranks (models/pyworker/ranks.py); cfg-2 is
                        refused: the model is guidance-distilled, there is no second branch
Precision is pinned: load_components(dtype=bf16), as upstream documents; the checkpoint's own
fp32-kept modules (patch projections, timestep MLP, output heads, VAE encoder, audio VAE) stay
fp32 by diffusers' _keep_in_fp32_modules.

Load, as the source (diffusers 0.42.1 modular_pipelines/minimax_h3) shows it:
  MiniMaxH3Blocks().get_workflow("t2va") -> MiniMaxH3ModularPipeline(blocks, bundle)
  -> load_components(dtype=torch.bfloat16)
which is what ModularPipeline.from_pretrained(bundle, workflow="t2va") does, except that the
blocks are ours to extend first (the step hook below). The t2va workflow loads only its own
components, and text-to-video is the call with no image/last_image/references:
  pipe(prompt=..., height=..., width=..., num_frames=..., num_inference_steps=...,
       generator=torch.Generator(...).manual_seed(seed), output_type="pt", output="videos")

The model's rules, and what the adapter does with them (nothing is clamped or rounded):
- frames: the video VAE encodes 17-frame chunks keeping 5 latents, so counts are 17n+5
  (124 = 17*7+5); the pipeline silently rounds other counts *up* (a logged warning). It also
  refuses a rounded count outside 5..15 s at its fixed 24 fps. So 17n+5 in 124..345; anything
  else is an error event here.
- size: height and width multiples of 32 (VAE 16x times patch 2; the pipeline raises on others);
  the released checkpoint was trained on aspect ratios 1:4..4:1, which the pipeline enforces only
  when it picks the canvas itself, so an explicit size outside them is refused here.
- fps is fixed at 24 (the model's own rate); any other fps is refused.
- guidance-distilled: the pipeline has no guidance_scale and no negative_prompt (it would only
  warn about and ignore them), so guidance must be 1.0 and a negative prompt is refused.
- num_inference_steps N counts the points of the sigma grid, terminal 0 included: N steps are
  N-1 transformer calls (MiniMaxH3Scheduler.set_timesteps), and N must be at least 2.
- output: the pipeline generates video *and* a stereo soundtrack in one packed sequence (the
  audio is denoised and decoded within the timed call); only the video track is qualified, the
  audio is dropped.

Progress and cancel: the modular pipeline has no callback_on_step_end. Its denoising loop is a
LoopSequentialPipelineBlocks whose sub-blocks run once per step, so the adapter appends one leaf
block to that loop (the modular pipelines' own extension point); it calls the
callback_on_step_end the job passes after each step, which reports progress and raises Cancelled
between steps. diffusers logs the raised Cancelled as a block error (stderr) before it reaches
the worker.

In-memory L0 bundles (models/minimax/build_l0.py: the configs alone, the weights drawn at load):
models/minimax/inmemory.py.

torch and diffusers are imported only in DiffusersBackend (at load), so the mapping, reporting,
rgb24 conversion and the protocol loop are importable and testable without them
(models/minimax/test_adapter.py).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # models/minimax/

import build_l0  # noqa: E402  (models/minimax/build_l0.py: the in-memory marker and model classes)
from inmemory import build_in_memory, in_memory_seed  # noqa: E402
from pyworker import worker as pw  # noqa: E402
from pyworker.worker import JobError, parse_size  # noqa: E402

PRECISION = "bf16"
WORKFLOW = "t2va"  # text only: no keyframe, no references
INDEX = "modular_model_index.json"  # what ModularPipeline loads a bundle by
HOOK_NAME = "mediaqual_step_end"
OFFLOAD_HOOK_NAME = "mediaqual_offload_text_encoder"
OFFLOADS = ("auto", "none", "text-encoder")

log = pw.logger("minimax-adapter")


class Geometry:
    """The pipeline's rules: what the released checkpoint gives (the source's defaults), or what a
    loaded pipeline says (DiffusersBackend reads them off it, so a tiny bundle gets its own)."""

    def __init__(self, frames_per_chunk=17, latents_per_chunk=5, fps=24, min_duration=5.0, max_duration=15.0,
                 canvas_multiple=32, min_aspect=1 / 4, max_aspect=4.0):
        self.frames_per_chunk = frames_per_chunk  # vae.config.clip_length
        self.latents_per_chunk = latents_per_chunk  # vae.tokens_chunk_size
        self.fps = fps
        self.min_duration = min_duration
        self.max_duration = max_duration
        self.canvas_multiple = canvas_multiple  # VAE spatial factor x transformer patch
        self.min_aspect = min_aspect
        self.max_aspect = max_aspect

    def frame_range(self):
        """(first, last) frame count on the rule whose duration is within min..max seconds."""
        step, off = self.frames_per_chunk, self.latents_per_chunk
        lo = off
        while lo / self.fps < self.min_duration:
            lo += step
        hi = lo
        while (hi + step) / self.fps <= self.max_duration:
            hi += step
        return lo, hi


RELEASED = Geometry()


# --------------------------------------------------------------------------------------------
# Request mapping (pure)


def check_frames(num_frames, g=RELEASED):
    """17n+5 within 5..15 s. The pipeline rounds other counts up with a warning; we refuse."""
    step, off = g.frames_per_chunk, g.latents_per_chunk
    lo, hi = g.frame_range()
    if num_frames % step != off:
        up = num_frames + (off - num_frames) % step  # align_num_frames: the next 17n+5 up
        down = up - step
        nearest = [n for n in (down, up) if lo <= n <= hi] or [lo if up < lo else hi]
        diffusers = "silently round it up to %d" % up if lo <= up <= hi else "round it up to %d, then refuse it" % up
        raise JobError(
            "unsupported_value",
            "num_frames %d is not %dn+%d (MiniMax-H3's video VAE encodes %d-frame chunks keeping %d latents; "
            "diffusers would %s); nearest allowed: %s"
            % (num_frames, step, off, step, off, diffusers, " or ".join(str(n) for n in nearest)),
            "num_frames",
        )
    if not lo <= num_frames <= hi:
        raise JobError(
            "unsupported_value",
            "num_frames %d is %.3f s at %d fps; MiniMax-H3 generates %g to %g s: %d..%d frames (%dn+%d)"
            % (num_frames, num_frames / g.fps, g.fps, g.min_duration, g.max_duration, lo, hi, step, off),
            "num_frames",
        )


def check_size(width, height, g=RELEASED):
    m = g.canvas_multiple
    if width % m or height % m:
        raise JobError(
            "unsupported_value",
            "size %dx%d is not a multiple of %d in both axes (MiniMax-H3's canvas: VAE 16x times patch 2); "
            "nearest below: %dx%d" % (width, height, m, max(m, width // m * m), max(m, height // m * m)),
            "size",
        )
    ratio = width / height
    if not g.min_aspect <= ratio <= g.max_aspect:
        raise JobError(
            "unsupported_value",
            "size %dx%d has aspect ratio %.3f; MiniMax-H3 was trained on 1:%g to %g:1"
            % (width, height, ratio, 1 / g.min_aspect, g.max_aspect),
            "size",
        )


def pipeline_kwargs(settings, generator_for, g=RELEASED):
    """Map spec.Settings (as sent in a run op) to MiniMaxH3ModularPipeline.__call__ keyword
    arguments for the t2va workflow.

    generator_for(seed) builds the torch.Generator. Raises JobError for anything the pipeline
    would otherwise adjust, ignore or fail on.
    """
    settings = pw.settings_object(settings)
    prompt = pw.prompt_setting(settings)
    if prompt == "":
        # The prompt is the whole conditioning (no negative, no unconditional branch); an empty
        # one packs no text rows at all.
        raise JobError("invalid_request", "MiniMax-H3 needs a non-empty prompt", "prompt")
    if pw.negative_setting(settings, None) is not None:
        raise JobError("unsupported_value",
                       "MiniMax-H3 is guidance-distilled and takes no negative_prompt (diffusers would ignore it)",
                       "negative_prompt")
    width, height = parse_size(settings.get("size"))
    check_size(width, height, g)
    num_frames = pw.int_setting(settings, "num_frames", minimum=1)
    check_frames(num_frames, g)
    fps = pw.int_setting(settings, "fps", minimum=1)
    if fps != g.fps:
        raise JobError("unsupported_value", "fps %d: MiniMax-H3 generates at a fixed %d fps" % (fps, g.fps), "fps")
    steps = pw.int_setting(settings, "num_inference_steps")
    if steps < 2:
        raise JobError(
            "unsupported_value",
            "num_inference_steps must be at least 2, got %d (MiniMax-H3 counts sigma grid points, the terminal 0 "
            "included: N steps are N-1 transformer calls)" % steps,
            "num_inference_steps",
        )
    guidance = pw.guidance_setting(settings)
    if guidance != 1.0:
        raise JobError(
            "unsupported_value",
            "guidance %g: MiniMax-H3 is guidance-distilled, guidance is fixed at 1.0 (the pipeline has no "
            "guidance_scale)" % guidance,
            "guidance",
        )
    seed = pw.int_setting(settings, "seed")
    return {
        "prompt": prompt,
        "height": height,
        "width": width,
        "num_frames": num_frames,
        "num_inference_steps": steps,
        "generator": generator_for(seed),
        # Tensors stay on the device: the backend quantizes them there (pyworker to_rgb24), so
        # only uint8 crosses to the host. With "np" the frames reached the host as 1.5 GB of
        # float32 and the worker quantized them there; the hand-over at the pinned shape was
        # 3.06 s on the H200 (reports/published/minimax-h3-L0-random-single-native).
        "output_type": "pt",
    }


def actual_for(settings, frames, width, height, steps_done):
    """spec.Actual of what was produced. fps is the model's fixed 24 (checked equal to the asked
    one); duration_s = frames / fps. The audio track is not reported."""
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


def report_step(callback, components, i, t):
    """What the loop's hook block does after denoising iteration i (0-based).

    N steps are N-1 iterations, and iteration i leaves the sample on sigma grid point i+2. The
    callback (PipelineFamily's, which counts index+1 as done) gets index i+1, so done counts grid
    points reached: progress runs 2..N of N, and a finished job reports the N steps it was asked
    for, in the pipeline's own units."""
    if callback is not None:
        callback(components, i + 1, t, {})


# --------------------------------------------------------------------------------------------
# The real backend (torch + diffusers, imported lazily)


def require_modular_bundle(bundle):
    if not bundle or not os.path.isfile(os.path.join(bundle, INDEX)):
        raise RuntimeError(
            "no diffusers modular bundle at %r (%s missing); set MEDIAQUAL_BUNDLES and the row's bundle, "
            "MEDIAQUAL_BUNDLE or --bundle" % (bundle, INDEX)
        )


class TextEncoderOffload:
    """Keeps the text encoder's weights in host memory and on the device only for the prompt
    encoding (--offload text-encoder). attach() copies them to the host and hooks the model: an
    accelerate hook copies them to the device before its forward (the text encoder step fires it
    by hand, as it calls text_encoder.model), and block(), a step placed right after the text
    encoder step, drops the device copy. The host copy is the master: inference never changes a
    weight, so nothing is copied back. The hook's execution_device is also what the pipeline's
    _execution_device reads while the text encoder, its first component, is off the device."""

    def __init__(self, device, torch):
        self.device = torch.device(device)
        self.torch = torch
        self.tensors = None
        self.host = None
        self.on_device = None
        self.onloads = 0

    def park(self, te):
        """Makes the host copy and drops the device one (a no-op copy for a model on the CPU).
        The in-memory build parks the text encoder as soon as it is drawn, so the GPU never holds
        it beside the transformer (a 68 GiB load peak instead of 130)."""
        if self.tensors is not None:
            return
        torch = self.torch
        self.tensors = dict(list(te.named_parameters()) + list(te.named_buffers()))
        with torch.no_grad():
            self.host = {name: t.data.to("cpu") for name, t in self.tensors.items()}
        self.on_device = True
        self.place(False)

    def attach(self, te):
        from accelerate.hooks import ModelHook, add_hook_to_module

        self.park(te)
        placement = self

        class Onload(ModelHook):
            execution_device = self.device

            def pre_forward(self, module, *args, **kwargs):
                placement.place(True)
                return args, kwargs

        add_hook_to_module(te, Onload())

    def place(self, on_device):
        if self.tensors is None or self.on_device == on_device:
            return
        t0 = time.perf_counter()
        for name, t in self.tensors.items():
            # copy=True: a device copy even where the device is the CPU (the tiny tests).
            t.data = self.host[name].to(self.device, copy=True) if on_device else self.host[name]
        self.on_device = on_device
        self.onloads += on_device
        if on_device and self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)
            log("text encoder copied onto %s in %.1f s" % (self.device, time.perf_counter() - t0))

    def block(self):
        from diffusers.modular_pipelines import ModularPipelineBlocks

        placement = self

        class DropTextEncoder(ModularPipelineBlocks):
            model_name = "minimax-h3"

            @property
            def description(self):
                return "mediaqual: drops the text encoder's device copy after the prompt encoding"

            @property
            def inputs(self):
                return []

            @property
            def intermediate_outputs(self):
                return []

            def __call__(self, components, state):
                placement.place(False)
                return components, state

        return DropTextEncoder()


def step_hook_block():
    """A leaf block for the denoising loop: calls the job's callback_on_step_end after each step.
    Its input becomes a pipeline input like any block's, so the job passes the callback as a call
    argument."""
    from diffusers.modular_pipelines import ModularPipelineBlocks
    from diffusers.modular_pipelines.modular_pipeline_utils import InputParam

    class StepEndHook(ModularPipelineBlocks):
        model_name = "minimax-h3"

        @property
        def description(self):
            return "mediaqual: calls callback_on_step_end after each denoising step (progress, cancel)"

        @property
        def inputs(self):
            return [InputParam(name="callback_on_step_end", default=None,
                               description="called as (pipeline, index, t, {}) after each step")]

        @property
        def intermediate_outputs(self):
            return []

        def __call__(self, components, block_state, i, t):
            report_step(block_state.callback_on_step_end, components, i, t)
            return components, block_state

    return StepEndHook()


class Config:
    def __init__(self, bundle, device="cuda:0", offload="auto", warmup_steps=0, layout=None, warmup_size=None,
                 warmup_frames=None):
        self.bundle = bundle
        self.device = device
        self.offload = offload
        self.warmup_steps = warmup_steps
        self.layout = layout
        self.warmup_size = warmup_size
        self.warmup_frames = warmup_frames


class DiffusersBackend(pw.TorchBackend):
    """MiniMaxH3ModularPipeline (t2va workflow) in bf16, CPU-offloaded onto one device."""

    precision = PRECISION

    def __init__(self, cfg):
        self.cfg = cfg
        bundle = cfg.bundle
        require_modular_bundle(bundle)
        seed = in_memory_seed(bundle)  # checked before torch: a broken config-only bundle says why at once
        # transformers 5.17's Qwen3VLProcessor (the processor/ component) is built on a
        # torchvision-backed video processor: without torchvision it fails to load.
        torch = self.setup(cfg.device, needs=[("torchvision", "MiniMax-H3's Qwen3VLProcessor needs it")])
        if cfg.offload == "auto" and not self.cuda:
            raise RuntimeError("--offload auto needs a CUDA device, got %s; use --offload none" % self.device)
        offload = cfg.offload
        if offload == "auto" and seed is not None:
            # The ComponentsManager's first move is every model to the CPU: 129.6 GiB at the real
            # sizes, more than a lent H200 host's 128 GiB. One GPU holds all but the text encoder.
            offload = "text-encoder"
        self.offload = offload
        self.check_memory(bundle, offload, cfg.layout)
        from diffusers import ComponentsManager
        from diffusers.modular_pipelines import LoopSequentialPipelineBlocks, MiniMaxH3Blocks, MiniMaxH3ModularPipeline

        log("loading %s (%s workflow) for %s, offload %s%s (CUDA_VISIBLE_DEVICES=%r)" % (
            bundle, WORKFLOW, self.device, offload, "" if offload == cfg.offload else " (--offload %s)" % cfg.offload,
            os.environ.get("CUDA_VISIBLE_DEVICES")))
        t0 = time.perf_counter()
        blocks = MiniMaxH3Blocks().get_workflow(WORKFLOW)
        loops = [b for b in blocks.sub_blocks.values() if isinstance(b, LoopSequentialPipelineBlocks)]
        if len(loops) != 1:
            raise RuntimeError("expected one denoising loop in the %s blocks, found %d" % (WORKFLOW, len(loops)))
        loops[0].sub_blocks[HOOK_NAME] = step_hook_block()
        placement = TextEncoderOffload(self.device, torch) if offload == "text-encoder" else None
        if placement is not None:
            names = list(blocks.sub_blocks.keys())
            if "text_encoder" not in names:
                raise RuntimeError("no text_encoder step in the %s blocks (%s)" % (WORKFLOW, ", ".join(names)))
            blocks.sub_blocks.insert(OFFLOAD_HOOK_NAME, placement.block(), names.index("text_encoder") + 1)
        manager = ComponentsManager() if offload == "auto" else None
        pipe = MiniMaxH3ModularPipeline(blocks=blocks, pretrained_model_name_or_path=bundle,
                                        components_manager=manager, collection="minimax-h3" if manager else None)
        if seed is None:
            pipe.load_components(dtype=torch.bfloat16)
        else:
            self.reset_peak()
            # The tokenizer, processor and schedulers are files of the bundle; the models are drawn.
            pipe.load_components(names=[n for n in pipe._component_specs if n not in build_l0.MODELS],
                                 pretrained_model_name_or_path=bundle)
            t1 = time.perf_counter()
            park = (lambda name, m: placement.park(m) if name == "text_encoder" else None) if placement else None
            models, sizes = build_in_memory(bundle, self.device, seed, torch, drawn=park)
            self.synchronize()
            pipe.update_components(**models)
            log("in-memory L0 weights (seed %d) drawn on %s in %.1f s: %s%s" % (
                seed, self.device, time.perf_counter() - t1,
                ", ".join("%s %s params" % (n, format(sizes[n], ",")) for n in build_l0.MODELS), self.memory_note()))
        # load_components only warns about a component it could not load; an incomplete
        # pipeline must not say "ready".
        missing = pipe.null_component_names
        if missing:
            raise RuntimeError("bundle components not loaded: %s (the load warnings above say why)" % ", ".join(missing))
        got = {name: getattr(pipe, name).dtype for name in ("transformer", "text_encoder", "vae")}
        if any(dt != torch.bfloat16 for dt in got.values()):
            raise RuntimeError("precision not as pinned: got %s, want bf16" % got)
        if manager is not None:
            manager.enable_auto_cpu_offload(device=self.device)
        elif placement is not None:
            for name, component in pipe.components.items():
                if name != "text_encoder" and isinstance(component, torch.nn.Module):
                    component.to(self.device)
            placement.attach(pipe.text_encoder)
        else:
            pipe = pipe.to(self.device)
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe
        self.placement = placement
        self.geometry = Geometry(
            frames_per_chunk=pipe.vae_frames_per_chunk, latents_per_chunk=pipe.vae_latents_per_chunk,
            fps=pipe.fps, min_duration=pipe.min_duration, max_duration=pipe.max_duration,
            canvas_multiple=pipe.canvas_multiple)
        g = self.geometry
        log("loaded in %.1f s: canvas multiple %d, frames %dn+%d in %d..%d at %d fps%s%s" % (
            time.perf_counter() - t0, g.canvas_multiple, g.frames_per_chunk, g.latents_per_chunk,
            *g.frame_range(), g.fps, self.memory_note(), self.note_weights(bundle)))
        # No engines to choose: the layout, then parity before ready (no fp32 floor where the
        # upcast transformer does not fit: 123 GiB at the real size).
        self.prepare(pipe, cfg.layout, None, cfg.warmup_steps)

    def check_memory(self, bundle, offload, layout):
        """Refuses, before anything loads, a layout whose weights cannot fit this host at the
        bundle's sizes (memory.py: every rank loads a whole copy; where auto offload puts them)."""
        import memory
        from pyworker import ranks

        _, world = ranks.parse_layout(layout)
        p = memory.plan(memory.model_bytes(bundle), offload, world)
        gpu = self.torch.cuda.get_device_properties(self.device).total_memory if self.cuda else None
        memory.check(p, layout, offload, memory.host_available(), gpu)
        log("memory plan: %d rank(s), each %.1f GiB of weights on the host and %.1f GiB on %s" % (
            world, p["host"] / memory.GIB, p["gpu"] / memory.GIB, "its GPU" if gpu else "the host"))

    def memory_note(self):
        """'; GPU peak ... resident ...; host peak RSS ...' for the load log lines."""
        import resource

        note = ""
        if self.cuda:
            torch = self.torch
            note = "; GPU peak %.1f GiB, resident %.1f GiB" % (
                torch.cuda.max_memory_allocated(self.device) / 2**30, torch.cuda.memory_allocated(self.device) / 2**30)
        return note + "; host peak RSS %.1f GiB" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)

    def warmup(self, steps):
        """--warmup-steps: parity's call at the smallest legal shape instead of the pinned one."""
        m = self.geometry.canvas_multiple
        t0 = time.perf_counter()
        self.call(dict(self.warmup_kwargs(steps), height=m, width=m, num_frames=self.geometry.frame_range()[0]))
        self.synchronize()
        log("warm-up (%d steps) took %.1f s" % (steps, time.perf_counter() - t0))

    def warmup_kwargs(self, steps):
        """Parity's call: the row's pinned shape (default the smallest legal one). Steps count
        grid points: steps - 1 transformer calls, and parity stops after the first."""
        m = self.geometry.canvas_multiple
        width, height = parse_size(self.cfg.warmup_size) if self.cfg.warmup_size else (m, m)
        return {"prompt": "warmup", "height": height, "width": width,
                "num_frames": self.cfg.warmup_frames or self.geometry.frame_range()[0],
                "num_inference_steps": max(2, steps), "output_type": "pt", "generator": self.generator(0)}

    def call(self, kwargs):
        """The native generation call; returns the frames as (F, H, W, 3) uint8, quantized on the
        device from the pipeline's (B, F, C, H, W) floats in [0, 1]. The pipeline also decodes a
        soundtrack (state "audio"), which is not returned."""
        with self.torch.inference_mode():
            videos = self.pipe(**kwargs, output="videos")
            return self.to_rgb24(videos[0])


# --------------------------------------------------------------------------------------------
# Protocol (models/pyworker/worker.py)


def _kwargs_for(backend, settings, reference_path):
    # Text-to-video: a reference, if any, is not used.
    return pipeline_kwargs(settings, backend.generator, backend.geometry)


def _actual(settings, shape, steps_done):
    frames, height, width, _ = shape
    return actual_for(settings, frames, width, height, steps_done)


class Worker(pw.Worker):
    """The docs/WORKER.md loop around a MiniMax-H3 backend.

    load() -> backend; the backend has: precision, geometry, generator(seed), call(kwargs) ->
    frames, synchronize(), reset_peak(), peak_memory_mb(), is_oom(exc), recover(), and optionally
    ready_info().
    """

    def __init__(self, out, load, clock=time.perf_counter):
        super().__init__(out, pw.PipelineFamily(load, _kwargs_for, _actual, clock), log)


# --------------------------------------------------------------------------------------------
# Entry point


def parse_args(argv, env):
    p = argparse.ArgumentParser(description="MiniMax-H3 modular pipeline worker for mediaserve (docs/WORKER.md)")
    p.add_argument("--bundle", help="diffusers modular snapshot directory (else $MEDIAQUAL_BUNDLE)")
    p.add_argument("--bundle-name", help="bundle under $MEDIAQUAL_BUNDLES, e.g. MiniMaxAI/MiniMax-H3")
    p.add_argument("--device", default=env.get("MEDIAQUAL_MINIMAX_DEVICE", "cuda:0"))
    p.add_argument("--offload", choices=OFFLOADS, default="auto")
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--layout", type=layout_arg, help="single or ulysses-N (default: one GPU, not reported)")
    p.add_argument("--warmup-size", help="WxH: the row's pinned size, for parity's step")
    p.add_argument("--warmup-frames", type=int, help="the row's pinned frame count, for parity's step")
    args = p.parse_args(argv)
    return Config(pw.resolve_bundle(args, env), pw.rank_device(args.device, args.layout, env), args.offload,
                  args.warmup_steps, args.layout, args.warmup_size, args.warmup_frames)


def layout_arg(value):
    value = pw.layout_arg(value)
    if value.startswith("cfg"):
        raise argparse.ArgumentTypeError("MiniMax-H3 is guidance-distilled: it has no guidance branches to split (%s)" % value)
    return value


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv, os.environ)
    pw.main(lambda proto: Worker(proto, lambda: DiffusersBackend(cfg)), cfg.layout, cfg.device != "cpu")


if __name__ == "__main__":
    main()
