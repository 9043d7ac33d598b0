"""The family-independent half of a Python mediaserve worker (docs/WORKER.md).

A family adapter (models/wan/adapter.py, models/qwenimage/adapter.py) supplies a *family object*
and this module does the rest: the stdin reader thread (run ops queued, cancel ops marking ids,
EOF cancelling what is left), the ready/fatal/progress/result/error lines on stdout, the rgb24
raw output file and the run loop.

The family object has:
  load()                  build the model (before "ready"); an exception becomes "fatal"
  precision               sent in "ready" (read after load)
  run(settings, reference_path, progress_cb, cancelled) -> Output
                          one job: progress_cb(done, total) reports steps, cancelled() says
                          whether the job was cancelled; raise JobError or Cancelled to end it
  ready_info()            optional: extra fields of the "ready" line
  is_oom(exc), recover()  optional: an exception for which is_oom is true becomes
                          "out_of_memory" (after recover()); any other one "pipeline_error"

PipelineFamily is such an object for a diffusers pipeline behind a backend (TorchBackend on the
device, a fake in the unit tests), parameterised by the family's settings mapping and report.

Nothing here imports torch, numpy or Pillow at module level: the mapping, the protocol and the
rgb24 conversion are testable without them.
"""

import gc
import json
import math
import os
import queue
import sys
import threading
import time

from . import l0, ranks

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def logger(name):
    """A log function writing 'name: msg' lines to stderr (the server copies stderr to its log)."""

    rank = os.environ.get(ranks.RANK_ENV)
    if rank:
        name = "%s[rank %s]" % (name, rank)

    def log(msg):
        sys.stderr.write("%s: %s\n" % (name, msg))
        sys.stderr.flush()

    return log


# --------------------------------------------------------------------------------------------
# Job outcomes


class JobError(Exception):
    """A job failure reported as an error event with a stable code."""

    def __init__(self, code, message, param=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


class Cancelled(Exception):
    """Raised from a step callback to stop the pipeline between steps, and to end a job with an
    error event of code "cancelled"."""

    def __init__(self, step, message=None):
        super().__init__(message or "cancelled at step %d" % step)
        self.step = step


class Output:
    """What a family's run() produced: video is (frames, height, width, 3) floats in [0,1] (a
    numpy array or nested lists; an image is one frame); actual is spec.Actual."""

    def __init__(self, video, actual, task_wall_ms, peak_memory_mb, phases_ms=None, compiled=0):
        self.video = video
        self.actual = actual
        self.task_wall_ms = task_wall_ms
        self.peak_memory_mb = peak_memory_mb
        self.phases_ms = phases_ms or {}
        self.compiled = compiled  # graphs a compiled engine made during the call: its time is in the Task


# --------------------------------------------------------------------------------------------
# Settings (spec.Settings as sent in a run op): the family-independent field checks


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


def check_size_multiple(width, height, size_multiple):
    """Refuse a size that is not a multiple of (height, width) granularity: diffusers would
    silently crop it."""
    mh, mw = size_multiple
    if height % mh or width % mw:
        raise JobError(
            "unsupported_value",
            "size %dx%d is not a multiple of %dx%d (diffusers would silently crop it to %dx%d)"
            % (width, height, mw, mh, width // mw * mw, height // mh * mh),
            "size",
        )


def int_setting(settings, key, minimum=None, lo=INT64_MIN, hi=INT64_MAX):
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


def settings_object(settings):
    if not isinstance(settings, dict):
        raise JobError("invalid_request", "settings must be an object")
    return settings


def prompt_setting(settings):
    prompt = settings.get("prompt")
    if not isinstance(prompt, str):
        raise JobError("invalid_request", "settings lack a prompt string", "prompt")
    return prompt


def negative_setting(settings, default):
    """negative_prompt; omitted (or null, or empty: the server omits an empty one) -> default."""
    negative = settings.get("negative_prompt")
    if negative is None or negative == "":
        return default
    if not isinstance(negative, str):
        raise JobError("invalid_request", "negative_prompt must be a string", "negative_prompt")
    return negative


def guidance_setting(settings):
    guidance = settings.get("guidance")
    if isinstance(guidance, bool) or not isinstance(guidance, (int, float)) or not math.isfinite(guidance):
        raise JobError("invalid_request", "guidance must be a finite number, got %r" % (guidance,), "guidance")
    return float(guidance)


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
    if isinstance(video, Tail):
        return rgb24(video.rest) if len(video.rest) else b""
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


def write_frames(path, data, append=False):
    """Overwrite (or append to) path with data; return the number of bytes written."""
    n = memoryview(data).nbytes
    with open(path, "ab" if append else "wb") as f:
        f.write(data)
    return n


class Tail:
    """A Task's output whose first frames already went out through its FrameStream: the whole
    clip's shape (F, H, W, 3), and the frames after the streamed ones as uint8 rows."""

    def __init__(self, shape, rest):
        self.shape = tuple(shape)
        self.rest = rest


class FrameStream:
    """A job's frames written to its output file while the Task still makes them, each run of
    frames announced with a "frames" event (docs/WORKER.md), so the server's encoder can take
    them before the Task returns. A backend pushes uint8 (F, H, W, 3) chunks in order; one
    thread writes them, so the pipeline never waits for the disk. On a GPU it waits for each
    chunk's asynchronous copy to the host (pinned memory, an event per chunk), so the decode
    is never stalled by a synchronising copy."""

    def __init__(self, path, announce):
        self.path = path
        self.announce = announce  # announce(frames, width, height)
        self.frames = 0  # frames pushed
        self.written = 0  # frames written and announced
        self.kept = []  # the pushed chunks as the backend made them (on its device)
        self.size = None  # (height, width)
        self.queue = None
        self.thread = None
        self.failure = None

    def push(self, chunk, host, ready=None):
        """chunk: the (F, H, W, 3) uint8 frames where they were made (kept for the check at the
        end); host: the same bytes in host memory, valid once ready() returns (or now)."""
        f, h, w = (int(d) for d in chunk.shape[:3])
        if self.size is not None and self.size != (h, w):
            raise JobError("bad_pipeline_output", "streamed frames changed size from %dx%d to %dx%d" % (
                self.size[1], self.size[0], w, h))
        self.size = (h, w)
        self.kept.append(chunk)
        self.frames += f
        if self.thread is None:
            self.queue = queue.Queue()
            self.thread = threading.Thread(target=self._write, name="frames", daemon=True)
            self.thread.start()
        self.queue.put((host, ready, self.frames))

    def _write(self):
        out = None
        while True:
            item = self.queue.get()
            if item is None:
                break
            if self.failure is not None:
                continue  # drain
            host, ready, frames = item
            try:
                if out is None:
                    out = open(self.path, "wb")
                if ready is not None:
                    ready()
                out.write(memoryview(host))
                out.flush()
                self.written = frames
                self.announce(frames, self.size[1], self.size[0])
            except Exception as e:  # surfaced by finish()
                self.failure = e
        if out is not None:
            out.close()

    def close(self):
        """Ends the writer (after finish, or after a failure) without raising."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None

    def finish(self):
        """Waits until every pushed frame is written and announced; returns their count."""
        self.close()
        if self.failure is not None:
            raise JobError("bad_pipeline_output", "writing streamed frames: %s" % self.failure)
        return self.written


# --------------------------------------------------------------------------------------------
# A diffusers pipeline as a family


class PipelineFamily:
    """The family object for a diffusers pipeline behind a backend.

    load() -> backend; the backend has: precision, generator(seed), call(kwargs) -> frames
    (F, H, W, 3), synchronize(), reset_peak(), peak_memory_mb(), is_oom(exc), recover(), and
    optionally ready_info(). The family supplies
      kwargs_for(backend, settings, reference_path) -> pipeline kwargs (raises JobError), with
          num_inference_steps set; called before anything else of the job
      actual_for(settings, (frames, height, width, channels), steps_done) -> spec.Actual
    """

    def __init__(self, load, kwargs_for, actual_for, clock=time.perf_counter):
        self._load = load
        self.kwargs_for = kwargs_for
        self.actual_for = actual_for
        self.clock = clock
        self.backend = None
        self.precision = None

    def load(self):
        self.backend = self._load()
        self.precision = self.backend.precision

    def ready_info(self):
        info = getattr(self.backend, "ready_info", None)
        return info() if info else {}

    def is_oom(self, exc):
        return self.backend.is_oom(exc)

    def recover(self):
        self.backend.recover()

    streams = True  # Worker.run hands run() the job's FrameStream

    def run(self, settings, reference_path, progress_cb, cancelled, stream=None):
        b = self.backend
        kwargs = self.kwargs_for(b, settings, reference_path)
        if cancelled():
            raise Cancelled(0, "cancelled before it started")
        total = kwargs["num_inference_steps"]
        done = [0]

        def on_step(pipe, i, t, cb_kwargs):
            done[0] = i + 1
            progress_cb(i + 1, total)
            if cancelled():
                pipe._interrupt = True  # in case the exception were swallowed
                raise Cancelled(i + 1)
            return {}

        kwargs["callback_on_step_end"] = on_step
        marks = getattr(b, "marks", None)
        b.stream = stream  # a backend that can stream frames reads it during call()
        graphs = getattr(b, "graphs", lambda: 0)
        before = graphs()
        try:
            b.reset_peak()
            if marks is not None:
                marks.clear()
            t0 = self.clock()
            video = b.call(kwargs)
            b.synchronize()
            t1 = self.clock()
            wall_ms = (t1 - t0) * 1000.0
            peak = b.peak_memory_mb()
            if cancelled():
                raise Cancelled(done[0])
        except Cancelled as c:
            raise Cancelled(c.step, "cancelled at step %d of %d" % (c.step, total))
        finally:
            b.stream = None
        phases = phases_ms(marks, t0, t1) if marks else {}
        actual = self.actual_for(settings, video_shape(video), done[0])
        for key in ("engine", "layout", "parity"):
            if getattr(b, key, None):
                actual[key] = getattr(b, key)
        return Output(video, actual, wall_ms, peak, phases, graphs() - before)


def phases_ms(marks, t0, t1):
    """Split a call [t0, t1] by the (name, start, end) marks a backend recorded around the
    pipeline's encode_prompt, VAE encode and VAE decode calls: encode_prompt (all its calls),
    encode_image (the VAE's encodes of reference images between the last prompt encoding and
    the first decode, when the pipeline makes any), denoise (the rest of that span: latents,
    the transformer steps, the scheduler) and decode (from there to the end: VAE,
    post-processing, quantizing, the copy to the host). Without prompt and decode marks
    nothing is claimed."""
    enc = [(a, b) for n, a, b in marks if n == "encode_prompt"]
    dec = [a for n, a, _ in marks if n == "decode"]
    if not enc or not dec:
        return {}
    enc_end = max(b for _, b in enc)
    dec_start = min(dec)
    img = sum(b - a for n, a, b in marks if n == "encode_image" and enc_end <= a and b <= dec_start)
    ms = lambda x: round(x * 1000.0, 3)  # noqa: E731
    phases = {
        "encode_prompt": ms(sum(b - a for a, b in enc)),
        "denoise": ms(dec_start - enc_end - img),
        "decode": ms(t1 - dec_start),
    }
    if any(n == "encode_image" for n, _, _ in marks):
        phases["encode_image"] = ms(img)
    return phases


# --------------------------------------------------------------------------------------------
# The real backend's device half (torch imported lazily)


def require_bundle(bundle):
    if not bundle:
        raise RuntimeError("no diffusers bundle given: set MEDIAQUAL_BUNDLES (with the row's --bundle-name), "
                           "MEDIAQUAL_BUNDLE or --bundle")
    if not os.path.isfile(os.path.join(bundle, "model_index.json")):
        raise RuntimeError(
            "no diffusers bundle at %r (model_index.json missing); set MEDIAQUAL_BUNDLES and the "
            "row's bundle, MEDIAQUAL_BUNDLE or --bundle" % (bundle,)
        )


ENGINES = ("eager", "regional-compile", "regional-compile-graphs", "regional-compile-fused", "regional-compile-fused-graphs")


class TorchBackend:
    """What every diffusers backend does on its device: deterministic set-up, seeded
    generators, CUDA sync and peak memory, OOM recovery, the engine. A subclass calls setup()
    first in its __init__ (after checking the bundle) and supplies pipe and call(kwargs)."""

    engine = None  # set by apply_engine, for families that offer a choice
    log = staticmethod(logger("worker"))  # a family sets its own: staticmethod(its logger)

    def apply_engine(self, pipe, engine):
        """eager: nothing. regional-compile: torch.compile the transformer's repeated block
        (diffusers' compile_repeated_blocks, fullgraph), compiled on the first call, which
        the caller makes before "ready" (a warm-up at the pinned shape). Its bytes differ from
        eager's but repeat exactly, so native path and server must use the same engine.
        regional-compile-graphs: that, with the transformer's forward replayed as a CUDA graph
        (graphs.py), recorded by the same warm-up: the same kernels, so the same bytes as
        regional-compile, launched once a call instead of block by block from Python. Call it
        after apply_layout: the graph records the transformer itself, inside any layout.
        regional-compile-fused: the family's own fused kernels (fuse_kernels) in the block first,
        then compiled as above; other bytes, which repeat. regional-compile-fused-graphs: that,
        graphed (not for a transformer that copies from the host inside its forward, as
        Qwen-Image's does: a CUDA graph capture cannot record that copy)."""
        if engine not in ENGINES:
            raise RuntimeError("engine %r is not one of %s" % (engine, ", ".join(ENGINES)))
        if "-fused" in engine:
            if self.fused_module is None:
                raise RuntimeError("engine %s: this family has no fused kernels" % engine)
            self.fuse_kernels(pipe)
        if engine.startswith("regional-compile"):
            # Inductor picks some kernel configs by timing them, so two processes (the native
            # path and the server) can pick differently and differ in the last bits (seen on the
            # H200). Deterministic mode takes its configs by heuristic instead.
            import torch._inductor.config as inductor

            if not hasattr(inductor, "deterministic"):
                raise RuntimeError("this torch has no torch._inductor.config.deterministic: regional-compile cannot promise the same bytes in two processes")
            inductor.deterministic = True
            pipe.transformer.compile_repeated_blocks(fullgraph=True)
        if engine.endswith("-graphs"):
            self.graph_transformer(pipe)
        self.engine = engine

    fused_module = None  # the family's fused-engine module ("wan.fused"; apply(transformer) -> {what: modules})

    def fuse_kernels(self, pipe):
        """The family's fused kernels (pyworker/fused.py, put in place by its own fused.py) in
        the transformer, after checking on the device that the GELU epilogue is the tanh GELU."""
        import importlib

        from . import fused

        rel = fused.verify_gelu(self.device)
        done = importlib.import_module(self.fused_module).apply(pipe.transformer)
        logger("fused")("%s (the tanh GELU epilogue on %s: relative difference %.1g)" % (
            ", ".join("%s in %d modules" % kv for kv in done.items()), self.device, rel))

    def graph_transformer(self, pipe):
        """Replays pipe.transformer's forward as CUDA graphs (graphs.py), innermost: under a
        layout's Branches, which calls the transformer through its _forward."""
        from .graphs import GraphedForward

        owner = self.cfg_parallel or pipe.transformer
        attr = "_forward" if self.cfg_parallel else "forward"
        self.cuda_graphs = GraphedForward(getattr(owner, attr), self.torch)
        setattr(owner, attr, self.cuda_graphs)

    cuda_graphs = None  # graphs.GraphedForward under regional-compile-graphs

    def graphs(self):
        """How many graphs torch.compile has made in this process, and CUDA graphs recorded (0
        for eager): a job during which it grew compiled or recorded inside its Task."""
        if self.engine in (None, "eager"):
            return 0
        from torch._dynamo.utils import counters

        recorded = self.cuda_graphs.recorded if self.cuda_graphs else 0
        return counters["stats"]["unique_graphs"] + recorded

    layout = None  # set by apply_layout, for families that offer a choice
    cfg_parallel = None  # parallel.CFGParallel under cfg-2
    parity = None  # parity.figures of the served runtime against eager, set by prepare

    def prepare(self, pipe, layout, engine, warmup_steps):
        """Layout, engine and warm-up, with parity before ready (parity.py): the first step of
        the warm-up's call on the reference runtime (eager, this device, nothing applied yet),
        in fp32 where it fits (the floor), then served after the layout, the engine and a
        warm-up of warmup_steps (0: none) are in place; raises parity.ParityError, naming the
        engine, layout and figure, when the served step is outside the bound."""
        from . import parity

        torch = self.torch
        probe = parity.StepProbe(pipe)

        def step(what):
            t0 = time.perf_counter()
            with torch.inference_mode():
                got = probe.run(self.run_pipe, self.warmup_kwargs(2))
            self.synchronize()
            self.log("parity: %s step took %.1f s" % (what, time.perf_counter() - t0))
            return got

        reference = step("reference (eager bf16)")
        fp32, why = None, ""
        fits, why = parity.fp32_fits(pipe.transformer, self.device, torch)
        if fits:
            with parity.FP32(pipe.transformer, torch):
                fp32 = step("fp32 floor")
            self.recover()
        if layout:
            self.apply_layout(pipe, layout)
        self.apply_engine(pipe, engine)
        if warmup_steps > 0:
            self.warmup(warmup_steps)
        if self.engine and self.engine.startswith("regional-compile"):
            self.keep_compiled_shapes()
        served = step("served (engine %s, layout %s)" % (self.engine, layout or "single"))
        self.parity = parity.figures(reference, served, fp32, why)
        self.log(parity.summary(self.parity))
        parity.verdict(self.parity, self.engine, layout)

    def keep_compiled_shapes(self):
        """After a compiling engine's warm-up: what the warm-up compiled is what runs compiled,
        and any other shape runs eagerly instead of compiling (torch.compiler.set_stance
        "eager_on_recompile"). Left to dynamo's default, a second shape recompiles the blocks
        with dynamic sizes, and that entry then also serves the pinned shape with other
        kernels: a request's bytes would depend on what the process served before (seen on
        the H200, issue #26), and the recompile would run inside a timed job. Now the bytes of
        a request are a function of the request: compiled kernels for the warmed shapes,
        eager ones for the rest."""
        self.torch.compiler.set_stance("eager_on_recompile")
        self.log("compiled shapes kept: a shape the warm-up did not compile runs eagerly")

    def warmup(self, steps):
        """One call of warmup_kwargs(steps) before "ready", so that CUDA/cuBLAS set-up and a
        compiled engine's compiling are not inside the first timed job."""
        t0 = time.perf_counter()
        with self.torch.inference_mode():
            self.run_pipe(**self.warmup_kwargs(steps))
        self.synchronize()
        self.log("warm-up (%d steps, engine %s) took %.1f s" % (steps, self.engine, time.perf_counter() - t0))

    def run_pipe(self, **kwargs):
        """The pipeline call, under cfg-2 told first whether it runs both branches (the
        family's both_branches(kwargs))."""
        cfg = self.cfg_parallel
        if cfg is None:
            return self.pipe(**kwargs)
        cfg.begin(self.both_branches(kwargs))
        out = self.pipe(**kwargs)
        self.log(cfg.report())
        return out

    def apply_layout(self, pipe, layout):
        """Spreads pipe's transformer over this Task's ranks as layout says (parallel.py); the
        group was started by main(). Bytes may differ between layouts, so native path and
        server must use the same one."""
        from . import parallel

        self.cfg_parallel = parallel.apply(pipe, layout, ranks.rank_from_env(), self.torch)
        self.layout = layout

    def setup(self, device, needs=()):
        """Check the Python stack (plus the family's own needs: (module, why) pairs) and import
        torch; returns the torch module."""
        # Deterministic cuBLAS needs this before CUDA initialises; it only fixes the workspace.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundle is local; never reach a hub
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import importlib.util

        for mod in ("torch", "diffusers", "transformers", "accelerate"):
            # accelerate is not optional: without it diffusers loads with low_cpu_mem_usage=False,
            # which it refuses for models with fp32-kept modules in a bf16 load.
            if importlib.util.find_spec(mod) is None:
                raise RuntimeError("python module %r is not installed (see docs/GPU.md for the device kit)" % mod)
        for mod, why in needs:
            if importlib.util.find_spec(mod) is None:
                raise RuntimeError("python module %r is not installed: %s" % (mod, why))
        import diffusers
        import torch
        import transformers

        # Loading bars are noise in the server's log (stderr is copied there line by line).
        diffusers.utils.logging.disable_progress_bar()
        transformers.utils.logging.disable_progress_bar()
        self.torch = torch
        # Same seed -> same output: fixed (non-benchmarked) cuDNN algorithms, deterministic ones
        # where cuDNN has a choice. Global torch.use_deterministic_algorithms is not set: it
        # raises on ops without a deterministic kernel, and the forward pass does not need it.
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            if not torch.cuda.is_available():
                raise RuntimeError("CUDA is not available (CUDA_VISIBLE_DEVICES=%r)" % os.environ.get("CUDA_VISIBLE_DEVICES"))
            torch.cuda.set_device(self.device)
        return torch

    def note_weights(self, bundle):
        """Records whether the bundle is L0-random (models/pyworker/l0.py's marker) and returns
        the note the load log line ends with."""
        self.l0_random = os.path.exists(os.path.join(bundle, l0.MARKER))
        return "; L0-RANDOM weights: mechanics, timing and shapes only, never quality" if self.l0_random else ""

    def ready_info(self):
        info = {"weights": "L0-random" if self.l0_random else "bundle"}
        for key in ("engine", "layout", "parity"):
            if getattr(self, key):
                info[key] = getattr(self, key)
        return info

    def generator(self, seed):
        return self.torch.Generator(device=self.device).manual_seed(seed)

    def to_rgb24(self, frames):
        """(F, C, H, W) floats in [0, 1] on the device (a pipeline's output_type="pt") -> an
        (F, H, W, 3) uint8 numpy array. Quantized on the device with rgb24()'s arithmetic
        (float32, clip to [0, 1], times 255, round half to even), so the bytes equal the CPU
        path's, and only uint8 crosses to the host: a quarter of the float copy, and no
        per-pixel work on the CPU."""
        torch = self.torch
        x = frames.float()
        if not bool(torch.isfinite(x).all()):
            raise JobError("non_finite_output", "the pipeline produced non-finite values (NaN/Inf)")
        q = self._quantize(x)
        s = self.stream
        if s is None or not s.kept:
            return q.cpu().numpy()
        # Frames went out while the VAE decoded: they must be the clip's own first frames (the
        # device compares them, a few ms), and only the rest crosses to the host.
        k = s.finish()
        if k > q.shape[0] or not torch.equal(q[:k], torch.cat(s.kept)):
            raise JobError("stream_mismatch", "the %d streamed frames are not the first frames of the %d-frame output" % (
                k, q.shape[0]))
        return Tail(q.shape, q[k:].cpu().numpy())

    stream = None  # the running job's FrameStream (PipelineFamily.run sets it)

    def _quantize(self, x):
        """(F, C, H, W) floats -> (F, H, W, 3) uint8 on the same device: rgb24()'s arithmetic."""
        return x.float().clamp(0.0, 1.0).mul_(255.0).round_().to(self.torch.uint8).permute(0, 2, 3, 1).contiguous()

    def stream_frames(self, frames):
        """Hands (F, C, H, W) floats in [0, 1], the first frames of the running job's output
        not yet streamed, to its FrameStream (a no-op outside a streamed job: warm-up, ranks
        other than 0). Quantized as to_rgb24 does; copied to pinned host memory without
        synchronising the device."""
        s = self.stream
        if s is None:
            return
        torch = self.torch
        q = self._quantize(frames)
        if q.device.type == "cuda":
            host = torch.empty(q.shape, dtype=torch.uint8, pin_memory=True)
            host.copy_(q, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            s.push(q, host.numpy(), done.synchronize)
        else:
            s.push(q, q.numpy())

    def instrument(self, pipe):
        """Time the pipeline's prompt encoding and VAE encode and decode (marks for phases_ms), syncing
        the device at each edge so a mark is when the GPU got there, not when the CPU queued
        it. A pipeline without either is left alone and reports no phases."""
        self.marks = []
        clock = time.perf_counter

        def timed(name, fn):
            def wrapper(*args, **kwargs):
                self.synchronize()
                a = clock()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.synchronize()
                    self.marks.append((name, a, clock()))

            return wrapper

        if hasattr(pipe, "encode_prompt") and getattr(pipe, "vae", None) is not None:
            pipe.encode_prompt = timed("encode_prompt", pipe.encode_prompt)
            pipe.vae.decode = timed("decode", pipe.vae.decode)
            if hasattr(pipe.vae, "encode"):  # an edit's reference, or an image-to-video's image
                pipe.vae.encode = timed("encode_image", pipe.vae.encode)

    def synchronize(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def reset_peak(self):
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_mb(self):
        """The device memory the job held at its peak: reserved by the caching allocator, which
        includes the CUDA graphs' private pool and the allocator's slack, not only the tensors
        allocated (max_memory_allocated), so it is what the device had to have."""
        if self.cuda:
            return self.torch.cuda.max_memory_reserved(self.device) / (1 << 20)
        return 0.0

    def is_oom(self, exc):
        return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()

    def recover(self):
        import gc

        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# Protocol


PAUSE_LOG_MS = 10.0  # a job's collections are logged from this much pause on, or any full one


def settle_heap():
    """After load: one full collection, then gc.freeze(), so the objects the load made (modules,
    parameters' wrappers, compiled graphs: most of a worker's heap) are never scanned again.
    Otherwise a full collection can land inside a Task and stall its kernel launches for as long
    as it takes to walk that heap."""
    gc.collect()
    gc.freeze()


class Pauses:
    """The garbage collector's pauses, through gc.callbacks: take() returns (collections, full
    collections, ms) since the last take(). The worker logs a job's, so a slow Task can be
    told apart from a collection inside it."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.count = self.full = 0
        self.ms = 0.0
        self.began = None
        gc.callbacks.append(self.callback)

    def callback(self, phase, info):
        if phase == "start":
            self.began = self.clock()
        elif self.began is not None:
            self.ms += (self.clock() - self.began) * 1000.0
            self.count += 1
            self.full += info.get("generation") == 2
            self.began = None

    def take(self):
        got = (self.count, self.full, self.ms)
        self.count = self.full = 0
        self.ms = 0.0
        return got

    def close(self):
        gc.callbacks.remove(self.callback)


def sticky_device_error(exc):
    """Whether exc is a CUDA error that poisons the process's context (an illegal address, a
    device-side assert, a launch failure: every later call fails too), as opposed to an out of
    memory, after which the worker recovers. torch raises them as AcceleratorError (RuntimeError
    before 2.9) with "CUDA error:" in the message."""
    msg = str(exc)
    return type(exc).__name__ == "AcceleratorError" or ("CUDA error:" in msg and "out of memory" not in msg)


class Worker:
    """The JSON-lines loop of docs/WORKER.md around a family object (see the module doc)."""

    def __init__(self, out, family, log):
        self.out = out
        self.family = family
        self.log = log
        self.group = None  # ranks.Group when the Task spans several GPUs (rank 0)
        self.out_lock = threading.Lock()
        self.state = threading.Lock()
        self.jobs = queue.Queue()
        self.queued = set()  # ids read but not started
        self.current = None  # id of the running job
        self.cancelled = set()
        self.pauses = None  # Pauses, from "ready" on
        self.sticky = None  # the device error after which this process must not serve again

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
                    self.log("ignoring a line that is not JSON: %.200s" % raw)
                    continue
                if not isinstance(msg, dict):
                    continue
                op, job_id = msg.get("op"), msg.get("id")
                if not isinstance(job_id, str) or not job_id:
                    if op in ("run", "cancel"):
                        self.log("ignoring %s without an id" % op)
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
            self.log("stdin: %s" % e)
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
        g = self.group
        err = None
        try:
            self.family.load()
        except Exception as e:
            err = "%s: %s" % (type(e).__name__, e)
            self.log("load failed: %s" % err)
        if g is not None:
            errs = g.gather(err)
            err = next(("rank %d: %s" % (r, e) for r, e in enumerate(errs) if e), None)
        if err:
            self.emit({"event": "fatal", "message": err})
            return 1
        settle_heap()
        self.pauses = Pauses()
        ready = {"event": "ready", "precision": self.family.precision, "pid": os.getpid()}
        info = getattr(self.family, "ready_info", None)
        if info:
            ready.update(info())
        if g is not None:
            ready["ranks"] = g.world
        self.emit(ready)
        t = threading.Thread(target=self.read, args=(inp,), name="stdin", daemon=True)
        t.start()
        while True:
            msg = self.jobs.get()
            if msg is None:
                if g is not None:
                    g.share(None)  # tells the other ranks to stop
                    g.close()
                return 0
            job_id = msg["id"]
            with self.state:
                self.queued.discard(job_id)
                self.current = job_id
            self.pauses.take()
            try:
                ok = self.run(job_id, msg)
            finally:
                with self.state:
                    self.current = None
                    self.cancelled.discard(job_id)
            n, full, ms = self.pauses.take()
            if full or ms >= PAUSE_LOG_MS:
                self.log("job %s: %d garbage collections (%d full) paused it for %.1f ms" % (job_id, n, full, ms))
            if not ok and g is not None:
                # A collective may be half-done on some rank: the group cannot go on.
                self.log("ending the group after job %s failed mid-call; the server restarts it" % job_id)
                return 1
            if not ok and self.sticky:
                self.log("exiting after job %s: the device reported an error that stays with this process (%s); "
                         "the server restarts the worker" % (job_id, self.sticky))
                return 1

    def is_cancelled_everywhere(self, job_id):
        """cancelled() for a job: on several ranks, rank 0's answer shared with all of them."""
        flag = self.is_cancelled(job_id)
        return flag if self.group is None else self.group.agree(flag)

    def produce(self, job_id, msg, output, reference, progress):
        """Runs the family and leaves the job's frames in output: streamed while the Task
        made them where the family can, the rest after. Returns (output, shape), and logs the
        worker's share of the job's hand-over: its time outside the Task call, around it (the
        settings, the reference, bookkeeping) and after it (frames to bytes, written)."""
        f = self.family
        stream = None
        more = {}
        if getattr(f, "streams", False):
            more["stream"] = stream = FrameStream(output, lambda n, w, h: self.emit(
                {"event": "frames", "id": job_id, "frames": n, "width": w, "height": h}))
        try:
            began = time.perf_counter()
            out = f.run(msg.get("settings"), reference, progress, lambda: self.is_cancelled_everywhere(job_id), **more)
            ran = time.perf_counter()
            shape = frames, height, width, _ = video_shape(out.video)
            data = rgb24(out.video)
            streamed = stream.finish() if stream is not None else 0
            if streamed and not isinstance(out.video, Tail):
                raise JobError("stream_mismatch", "%d frames were streamed but the output was handed over whole" % streamed)
            n = write_frames(output, data, append=streamed > 0) + streamed * height * width * 3
            if n != frames * height * width * 3:
                raise JobError("bad_pipeline_output", "wrote %d bytes, expected %d" % (n, frames * height * width * 3))
            self.log("job %s: outside the Task call %.1f ms around it, %.1f ms after it (%d frames streamed)" % (
                job_id, max(0.0, (ran - began) * 1000.0 - out.task_wall_ms), (time.perf_counter() - ran) * 1000.0, streamed))
            if out.compiled:
                self.log("job %s: the compiled engine compiled %d new graph(s) during the Task: its time includes "
                         "compiling (a shape the warm-up did not have)" % (job_id, out.compiled))
            return out, shape
        finally:
            if stream is not None:
                stream.close()  # no frames event after the job's answer, whatever it is

    def run(self, job_id, msg):
        """One job, ending in a result or error event. False when it failed in a way that may
        have left the pipeline (or, on several ranks, a collective) in an unknown state."""
        f = self.family
        output = msg.get("output")

        def progress(done, total):
            self.emit({"event": "progress", "id": job_id, "done": done, "total": total})

        try:
            if not isinstance(output, str) or not output:
                raise JobError("invalid_request", "run has no output path")
            reference = reference_of(msg)
            if self.group is not None:
                self.group.share(msg)  # the other ranks run it beside this one
            out, (frames, height, width, _) = self.produce(job_id, msg, output, reference, progress)
        except Cancelled as c:
            self.error(job_id, "cancelled", str(c))
            return True
        except JobError as e:
            self.error(job_id, e.code, e.message, e.param)
            return True
        except Exception as e:
            dead = self.group.dead() if self.group is not None else []
            if dead:
                # Not this job's fault: a rank died under it. No answer; the server sees the
                # group end and reports the job worker_crashed with these lines.
                for r, status in dead:
                    self.log("job %s: rank %d exited with status %s (%s: %s): ending the group" % (
                        job_id, r, status, type(e).__name__, e))
                return False
            is_oom = getattr(f, "is_oom", None)
            if is_oom and is_oom(e):
                if self.group is None:
                    f.recover()
                self.error(job_id, "out_of_memory", str(e)[:2000])
            else:
                self.log("job %s failed: %s: %s" % (job_id, type(e).__name__, e))
                self.error(job_id, "pipeline_error", "%s: %s" % (type(e).__name__, str(e)[:2000]))
                if sticky_device_error(e):
                    self.sticky = "%s: %s" % (type(e).__name__, str(e)[:200])
            return False
        self.emit({
            "event": "result",
            "id": job_id,
            "frames": frames,
            "width": width,
            "height": height,
            "actual": out.actual,
            "task_wall_ms": round(out.task_wall_ms, 3),
            "phases_ms": out.phases_ms,
            "peak_memory_mb": round(out.peak_memory_mb, 1),
        })
        return True


# --------------------------------------------------------------------------------------------
# The reference image of an edit


def reference_of(msg):
    """A run op's reference: None, or the path of the file as it was uploaded (docs/WORKER.md)."""
    ref = msg.get("reference")
    if ref is None:
        return None
    if not isinstance(ref, str) or not ref:
        raise JobError("invalid_request", "run's reference is not a path")
    return ref


def open_reference(ref):
    """The uploaded reference as an RGB Pillow image, decoded by its content (PNG, JPEG,
    WebP). OSError when it cannot be read or decoded."""
    from PIL import Image

    with Image.open(ref) as im:
        im.load()
        # An RGB upload (the common case) as decoded: convert would copy it (about 4 ms for 1024²).
        return im if im.mode == "RGB" else im.convert("RGB")


# --------------------------------------------------------------------------------------------
# Entry point helpers


def layout_arg(value):
    """argparse type of --layout: a valid layout string (ranks.parse_layout)."""
    import argparse

    try:
        ranks.parse_layout(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    return value


rank_device = ranks.rank_device


def resolve_bundle(args, env):
    """--bundle, else $MEDIAQUAL_BUNDLE, else $MEDIAQUAL_BUNDLES/<--bundle-name>, else None."""
    if args.bundle:
        return args.bundle
    if env.get("MEDIAQUAL_BUNDLE"):
        return env["MEDIAQUAL_BUNDLE"]
    if env.get("MEDIAQUAL_BUNDLES") and args.bundle_name:
        return os.path.join(env["MEDIAQUAL_BUNDLES"], args.bundle_name)
    return None


def main(make_worker, layout=None, cuda=True):
    """Serve stdin with make_worker(protocol_out) and exit with its status. A layout of
    several ranks (ranks.py) starts or joins the group first (NCCL between GPUs when cuda,
    else gloo); ranks other than 0 follow rank 0 instead of serving.

    stdout is the protocol: keep a private handle on it and point fd 1 (and sys.stdout) at
    stderr, so that a stray print or a C library writing to fd 1 cannot corrupt it."""
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _, world = ranks.parse_layout(layout)
    worker = make_worker(proto)
    if world == 1:
        rc = worker.serve(sys.stdin.buffer)
    else:
        group = ranks.Group(ranks.rank_from_env(), world, worker.log)
        if group.rank == 0:
            group.spawn()
        group.join(cuda)
        if group.rank == 0:
            worker.group = group
            rc = worker.serve(sys.stdin.buffer)
        else:
            rc = ranks.follow(worker.family, group, worker.log)
    try:
        proto.flush()
    except OSError:
        pass
    # Skip interpreter teardown (CUDA contexts, daemon threads): the job is done or dropped.
    sys.stderr.flush()
    os._exit(rc)
