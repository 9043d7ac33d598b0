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
  --warmup-steps N      before "ready", run one N-step generation at the smallest legal shape so
                        that CUDA/cuBLAS initialisation is not inside the first timed job (0: off)
Precision is pinned: transformer and text encoder bf16, VAE fp32.

Settings map to WanPipeline.__call__ exactly; nothing is clamped or rounded: a num_frames that is
not 4k+1, or a size that is not a multiple of the VAE x patch stride, is answered with an error
event where diffusers would silently round it.

torch and diffusers are imported only in DiffusersBackend (at load), so the mapping, reporting,
rgb24 conversion and the protocol loop are importable and testable without them
(models/wan/test_adapter.py).
"""

import argparse
import json
import math
import os
import queue
import sys
import threading
import time

PRECISION = "bf16"
FRAME_STEP = 4  # Wan's VAE compresses time 4x: num_frames must be 4k+1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


# --------------------------------------------------------------------------------------------
# Request mapping (pure)


class JobError(Exception):
    """A job failure reported as an error event with a stable code."""

    def __init__(self, code, message, param=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


class Cancelled(Exception):
    """Raised from the step callback to stop the pipeline between steps."""

    def __init__(self, step):
        super().__init__("cancelled at step %d" % step)
        self.step = step


def parse_size(value):
    """'WxH' with positive decimal integers -> (w, h)."""
    if not isinstance(value, str):
        raise JobError("invalid_request", "size %r is not a 'WxH' string" % (value,), "size")
    w, sep, h = value.partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or not w.isascii() or not h.isascii():
        raise JobError("invalid_request", "size %r is not of the form WxH" % value, "size")
    wi, hi = int(w), int(h)
    if wi <= 0 or hi <= 0:
        raise JobError("invalid_request", "size %r has a zero dimension" % value, "size")
    return wi, hi


def _int(settings, key, minimum=None, lo=INT64_MIN, hi=INT64_MAX):
    if key not in settings:
        raise JobError("invalid_request", "settings lack %s" % key, key)
    v = settings[key]
    if isinstance(v, bool) or not isinstance(v, int):
        # JSON numbers like 17.0 are not integers here: the server sends integers.
        raise JobError("invalid_request", "%s must be an integer, got %r" % (key, v), key)
    if v < lo or v > hi:
        raise JobError("invalid_request", "%s %d is out of range" % (key, v), key)
    if minimum is not None and v < minimum:
        raise JobError("unsupported_value", "%s must be at least %d, got %d" % (key, minimum, v), key)
    return v


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
    if not isinstance(settings, dict):
        raise JobError("invalid_request", "settings must be an object")
    prompt = settings.get("prompt")
    if not isinstance(prompt, str):
        raise JobError("invalid_request", "settings lack a prompt string", "prompt")
    negative = settings.get("negative_prompt", "")
    if negative is None:
        negative = ""
    if not isinstance(negative, str):
        raise JobError("invalid_request", "negative_prompt must be a string", "negative_prompt")
    width, height = parse_size(settings.get("size"))
    mh, mw = size_multiple
    if height % mh or width % mw:
        raise JobError(
            "unsupported_value",
            "size %dx%d is not a multiple of %dx%d (diffusers would silently crop it to %dx%d)"
            % (width, height, mw, mh, width // mw * mw, height // mh * mh),
            "size",
        )
    num_frames = _int(settings, "num_frames")
    check_frames(num_frames, frame_step)
    _int(settings, "fps", minimum=1)  # needed for the report; not a pipeline argument
    steps = _int(settings, "num_inference_steps", minimum=1)
    guidance = settings.get("guidance")
    if isinstance(guidance, bool) or not isinstance(guidance, (int, float)) or not math.isfinite(guidance):
        raise JobError("invalid_request", "guidance must be a finite number, got %r" % (guidance,), "guidance")
    seed = _int(settings, "seed")
    return {
        "prompt": prompt,
        # Omitted means empty: no hidden default (not the upstream Chinese negative prompt).
        "negative_prompt": negative,
        "height": height,
        "width": width,
        "num_frames": num_frames,
        "num_inference_steps": steps,
        "guidance_scale": float(guidance),
        "generator": generator_for(seed),
        "output_type": "np",
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
# Frames -> rgb24


def quantize(x):
    """One channel value in [0,1] -> 0..255: round(clip(x, 0, 1) * 255), round half to even
    (as numpy.round)."""
    if not math.isfinite(x):
        raise JobError("non_finite_output", "the pipeline produced non-finite values (NaN/Inf)")
    return int(round(min(max(x, 0.0), 1.0) * 255.0))


def video_shape(video):
    """(frames, height, width, channels) of an (F, H, W, C) array or nested list."""
    if hasattr(video, "shape"):
        return tuple(int(d) for d in video.shape)
    shape = []
    v = video
    while isinstance(v, (list, tuple)):
        shape.append(len(v))
        if not v:
            break
        v = v[0]
    return tuple(shape)


def rgb24(video):
    """Frames (F, H, W, 3) of floats in [0,1] -> raw rgb24 bytes-like (row-major, frame after
    frame). A numpy array takes the vectorised path (numpy imported here, lazily); nested lists
    take the pure-Python path, which defines the same arithmetic."""
    shape = video_shape(video)
    if len(shape) != 4 or shape[3] != 3:
        raise JobError("bad_pipeline_output", "expected frames of shape (F, H, W, 3), got %s" % (shape,))
    if hasattr(video, "shape"):
        import numpy as np

        arr = np.asarray(video)
        if arr.dtype == np.uint8:
            return np.ascontiguousarray(arr)
        if not np.isfinite(arr).all():
            raise JobError("non_finite_output", "the pipeline produced non-finite values (NaN/Inf)")
        out = np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)
        return np.ascontiguousarray(out)
    buf = bytearray()
    for frame in video:
        for row in frame:
            for px in row:
                buf.append(quantize(px[0]))
                buf.append(quantize(px[1]))
                buf.append(quantize(px[2]))
    return bytes(buf)


def write_frames(path, data):
    """Overwrite path with data; return the number of bytes written."""
    n = memoryview(data).nbytes
    with open(path, "wb") as f:
        f.write(data)
    return n


# --------------------------------------------------------------------------------------------
# The real backend (torch + diffusers, imported lazily)


class Config:
    def __init__(self, bundle, flow_shift, device="cuda:0", warmup_steps=0):
        self.bundle = bundle
        self.flow_shift = float(flow_shift)
        self.device = device
        self.warmup_steps = warmup_steps


class DiffusersBackend:
    """WanPipeline on one device: bf16 transformer and text encoder, fp32 VAE, UniPC flow_shift."""

    precision = PRECISION

    def __init__(self, cfg):
        self.cfg = cfg
        bundle = cfg.bundle
        if not bundle or not os.path.isfile(os.path.join(bundle, "model_index.json")):
            raise RuntimeError(
                "no diffusers bundle at %r (model_index.json missing); set MEDIAQUAL_BUNDLES and the "
                "row's bundle, MEDIAQUAL_BUNDLE or --bundle" % (bundle,)
            )
        # Deterministic cuBLAS needs this before CUDA initialises; it only fixes the workspace.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundle is local; never reach a hub
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import importlib.util

        for mod in ("torch", "diffusers", "transformers", "accelerate"):
            # accelerate is not optional: without it diffusers loads with low_cpu_mem_usage=False,
            # which it refuses for WanTransformer3DModel's fp32-kept modules in a bf16 load.
            if importlib.util.find_spec(mod) is None:
                raise RuntimeError("python module %r is not installed (see docs/GPU.md for the device kit)" % mod)
        import diffusers
        import torch
        import transformers
        from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline

        # Loading bars are noise in the server's log (stderr is copied there line by line).
        diffusers.utils.logging.disable_progress_bar()
        transformers.utils.logging.disable_progress_bar()
        self.torch = torch
        # Same seed -> same output: fixed (non-benchmarked) cuDNN algorithms, deterministic ones
        # where cuDNN has a choice. Global torch.use_deterministic_algorithms is not set: it
        # raises on ops without a deterministic kernel, and the forward pass does not need it.
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        self.device = torch.device(cfg.device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            if not torch.cuda.is_available():
                raise RuntimeError("CUDA is not available (CUDA_VISIBLE_DEVICES=%r)" % os.environ.get("CUDA_VISIBLE_DEVICES"))
            torch.cuda.set_device(self.device)
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
        self.l0_random = os.path.exists(os.path.join(bundle, "L0-RANDOM.txt"))
        log("loaded in %.1f s: size multiple %s, frames %dk+1%s" % (
            time.perf_counter() - t0, self.size_multiple, self.frame_step,
            "; L0-RANDOM weights: mechanics, timing and shapes only, never quality" if self.l0_random else ""))
        if cfg.warmup_steps > 0:
            self.warmup(cfg.warmup_steps)

    def warmup(self, steps):
        h, w = self.size_multiple
        t0 = time.perf_counter()
        self.pipe(prompt="warmup", height=h * 2, width=w * 2, num_frames=self.frame_step + 1,
                  num_inference_steps=steps, guidance_scale=5.0, output_type="np",
                  generator=self.generator(0))
        self.synchronize()
        log("warm-up (%d steps) took %.1f s" % (steps, time.perf_counter() - t0))

    def generator(self, seed):
        return self.torch.Generator(device=self.device).manual_seed(seed)

    def call(self, kwargs):
        """The native generation call; returns frames (F, H, W, 3) float in [0, 1]."""
        with self.torch.inference_mode():
            out = self.pipe(**kwargs)
        return out.frames[0]

    def synchronize(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def reset_peak(self):
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_mb(self):
        if self.cuda:
            return self.torch.cuda.max_memory_allocated(self.device) / (1 << 20)
        return 0.0

    def is_oom(self, exc):
        return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()

    def recover(self):
        import gc

        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()

    def ready_info(self):
        return {"weights": "L0-random" if self.l0_random else "bundle"}


# --------------------------------------------------------------------------------------------
# Protocol


def log(msg):
    sys.stderr.write("wan-adapter: %s\n" % msg)
    sys.stderr.flush()


class Worker:
    """The JSON-lines loop of docs/WORKER.md around a backend.

    load() -> backend; the backend has: precision, size_multiple, frame_step, generator(seed),
    call(kwargs) -> frames, synchronize(), reset_peak(), peak_memory_mb(), is_oom(exc), recover(),
    and optionally ready_info().
    """

    def __init__(self, out, load, clock=time.perf_counter):
        self.out = out
        self.load = load
        self.clock = clock
        self.out_lock = threading.Lock()
        self.state = threading.Lock()
        self.jobs = queue.Queue()
        self.queued = set()  # ids read but not started
        self.current = None  # id of the running job
        self.cancelled = set()
        self.backend = None

    # ---- output

    def emit(self, obj):
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n"
        with self.out_lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the server is gone; stdin EOF will end us

    def error(self, job_id, code, message, param=None):
        ev = {"event": "error", "id": job_id, "code": code, "message": message}
        if param:
            ev["param"] = param
        self.emit(ev)

    # ---- input

    def read(self, inp):
        """Reader thread: runs go to the queue, cancels mark ids; EOF drops what is left."""
        try:
            for raw in inp:
                if isinstance(raw, bytes):
                    raw = raw.decode("utf-8", "replace")
                raw = raw.strip()
                if not raw:
                    continue
                try:
                    msg = json.loads(raw)
                except ValueError:
                    log("ignoring a line that is not JSON: %.200s" % raw)
                    continue
                if not isinstance(msg, dict):
                    continue
                op, job_id = msg.get("op"), msg.get("id")
                if not isinstance(job_id, str) or not job_id:
                    if op in ("run", "cancel"):
                        log("ignoring %s without an id" % op)
                    continue
                if op == "run":
                    with self.state:
                        self.queued.add(job_id)
                    self.jobs.put(msg)
                elif op == "cancel":
                    with self.state:
                        if job_id in self.queued or job_id == self.current:
                            self.cancelled.add(job_id)
                        # else: not running (it may have just ended): ignored
        except Exception as e:  # a broken stdin is EOF
            log("stdin: %s" % e)
        finally:
            with self.state:
                self.cancelled.update(self.queued)
                if self.current is not None:
                    self.cancelled.add(self.current)
            self.jobs.put(None)

    def is_cancelled(self, job_id):
        with self.state:
            return job_id in self.cancelled

    # ---- main loop

    def serve(self, inp):
        try:
            self.backend = self.load()
        except Exception as e:
            log("load failed: %s: %s" % (type(e).__name__, e))
            self.emit({"event": "fatal", "message": "%s: %s" % (type(e).__name__, e)})
            return 1
        ready = {"event": "ready", "precision": self.backend.precision, "pid": os.getpid()}
        info = getattr(self.backend, "ready_info", None)
        if info:
            ready.update(info())
        self.emit(ready)
        t = threading.Thread(target=self.read, args=(inp,), name="stdin", daemon=True)
        t.start()
        while True:
            msg = self.jobs.get()
            if msg is None:
                return 0
            job_id = msg["id"]
            with self.state:
                self.queued.discard(job_id)
                self.current = job_id
            try:
                self.run(job_id, msg)
            finally:
                with self.state:
                    self.current = None
                    self.cancelled.discard(job_id)

    def run(self, job_id, msg):
        b = self.backend
        settings = msg.get("settings")
        output = msg.get("output")
        try:
            if not isinstance(output, str) or not output:
                raise JobError("invalid_request", "run has no output path")
            kwargs = pipeline_kwargs(settings, b.generator, b.frame_step, b.size_multiple)
        except JobError as e:
            self.error(job_id, e.code, e.message, e.param)
            return
        if self.is_cancelled(job_id):
            self.error(job_id, "cancelled", "cancelled before it started")
            return
        total = kwargs["num_inference_steps"]
        done = [0]

        def on_step(pipe, i, t, cb_kwargs):
            done[0] = i + 1
            self.emit({"event": "progress", "id": job_id, "done": i + 1, "total": total})
            if self.is_cancelled(job_id):
                pipe._interrupt = True  # in case the exception were swallowed
                raise Cancelled(i + 1)
            return {}

        kwargs["callback_on_step_end"] = on_step
        try:
            b.reset_peak()
            t0 = self.clock()
            video = b.call(kwargs)
            b.synchronize()
            wall_ms = (self.clock() - t0) * 1000.0
            peak = b.peak_memory_mb()
            if self.is_cancelled(job_id):
                raise Cancelled(done[0])
            frames, height, width, _ = video_shape(video)
            data = rgb24(video)
            n = write_frames(output, data)
            if n != frames * height * width * 3:
                raise JobError("bad_pipeline_output", "wrote %d bytes, expected %d" % (n, frames * height * width * 3))
        except Cancelled as c:
            self.error(job_id, "cancelled", "cancelled at step %d of %d" % (c.step, total))
            return
        except JobError as e:
            self.error(job_id, e.code, e.message, e.param)
            return
        except Exception as e:
            if b.is_oom(e):
                b.recover()
                self.error(job_id, "out_of_memory", str(e)[:2000])
            else:
                log("job %s failed: %s: %s" % (job_id, type(e).__name__, e))
                self.error(job_id, "pipeline_error", "%s: %s" % (type(e).__name__, str(e)[:2000]))
            return
        self.emit({
            "event": "result",
            "id": job_id,
            "frames": frames,
            "width": width,
            "height": height,
            "actual": actual_for(settings, frames, width, height, done[0]),
            "task_wall_ms": round(wall_ms, 3),
            "peak_memory_mb": round(peak, 1),
        })


# --------------------------------------------------------------------------------------------
# Entry point


def resolve_bundle(args, env):
    if args.bundle:
        return args.bundle
    if env.get("MEDIAQUAL_BUNDLE"):
        return env["MEDIAQUAL_BUNDLE"]
    if env.get("MEDIAQUAL_BUNDLES") and args.bundle_name:
        return os.path.join(env["MEDIAQUAL_BUNDLES"], args.bundle_name)
    return None


def parse_args(argv, env):
    p = argparse.ArgumentParser(description="Wan WanPipeline worker for mediaserve (docs/WORKER.md)")
    p.add_argument("--bundle", help="diffusers snapshot directory (else $MEDIAQUAL_BUNDLE)")
    p.add_argument("--bundle-name", help="bundle under $MEDIAQUAL_BUNDLES, e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
    p.add_argument("--flow-shift", type=float, required=True, help="UniPC flow_shift pinned for the checkpoint")
    p.add_argument("--device", default=env.get("MEDIAQUAL_WAN_DEVICE", "cuda:0"))
    p.add_argument("--warmup-steps", type=int, default=0)
    args = p.parse_args(argv)
    return Config(resolve_bundle(args, env), args.flow_shift, args.device, args.warmup_steps)


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv, os.environ)
    # stdout is the protocol: keep a private handle on it and point fd 1 (and sys.stdout) at
    # stderr, so that a stray print or a C library writing to fd 1 cannot corrupt it.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker(proto, lambda: DiffusersBackend(cfg))
    rc = worker.serve(sys.stdin.buffer)
    try:
        proto.flush()
    except OSError:
        pass
    # Skip interpreter teardown (CUDA contexts, daemon threads): the job is done or dropped.
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    main()
