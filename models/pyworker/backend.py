"""A diffusers pipeline as a worker's family (PipelineFamily), and the device half every
family's backend shares (TorchBackend: set-up, seeds, the engines and layouts, parity before
ready, peak memory, OOM recovery). torch is imported lazily, in TorchBackend.setup."""

import os
import time

from . import l0, ranks
from .frames import Tail, video_shape
from .job import Cancelled, JobError, Output, logger


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
        wall, cpu = time.perf_counter(), time.thread_time()
        kwargs = self.kwargs_for(b, settings, reference_path)
        if reference_path is not None and hasattr(b, "log"):
            # Wall against this thread's CPU time: a decode that waited (the GIL, the scheduler)
            # is told apart from a slow one.
            b.log("reference read in %.1f ms (%.1f ms of this thread's CPU)" % (
                (time.perf_counter() - wall) * 1000.0, (time.thread_time() - cpu) * 1000.0))
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
        graphs = getattr(b, "graphs", lambda: (0, 0))
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
        after = graphs()
        return Output(video, actual, wall_ms, peak, phases, (after[0] - before[0], after[1] - before[1]))


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
COMPILE_OPTIONS = {"deterministic": True}  # inductor options of every regional compile (apply_engine)


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
        graphed. A family refuses what it cannot run (check_engine)."""
        self.check_engine(engine)
        if "-fused" in engine:
            self.fuse_kernels(pipe)
        if engine.startswith("regional-compile"):
            # Inductor picks some kernel configs by timing them, so two processes (the native
            # path and the server, or two machines) can pick differently and differ in the last
            # bits. Deterministic mode takes its configs by heuristic instead. It is the
            # compile's own option: the global torch._inductor.config.deterministic does not
            # last, as dynamo restores torch.use_deterministic_algorithms' state after every
            # frame it compiles, and that setter writes the flag too (torch 2.11). Set globally,
            # every compile after the first (Qwen's, for the negative prompt's length) ran
            # without it, and Qwen's bytes differed from machine to machine.
            import torch._inductor.config as inductor

            if not hasattr(inductor, "deterministic"):
                raise RuntimeError("this torch has no torch._inductor.config.deterministic: regional-compile cannot promise the same bytes in two processes")
            pipe.transformer.compile_repeated_blocks(fullgraph=True, options=COMPILE_OPTIONS)
        if engine.endswith("-graphs"):
            self.graph_transformer(pipe)
        self.engine = engine

    fused_module = None  # the family's fused-engine module ("wan.fused"; apply(transformer) -> {what: modules})
    no_graphs = None  # why the family's transformer cannot be recorded as a CUDA graph, if it cannot

    @classmethod
    def refusal(cls, engine):
        """Why this family does not run engine (one of ENGINES), or None."""
        if "-fused" in engine and cls.fused_module is None:
            return "this family has no fused kernels"
        if engine.endswith("-graphs") and cls.no_graphs:
            return cls.no_graphs
        return None

    @classmethod
    def offered(cls):
        """The engines this family runs."""
        return [e for e in ENGINES if cls.refusal(e) is None]

    @classmethod
    def check_engine(cls, engine):
        """Refuses, by name and before anything loads, an engine this family does not run."""
        if engine not in ENGINES:
            raise RuntimeError("engine %r is not one of %s" % (engine, ", ".join(ENGINES)))
        why = cls.refusal(engine)
        if why is not None:
            raise RuntimeError("engine %s is not offered: %s; offered: %s" % (engine, why, ", ".join(cls.offered())))

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
    parity_runs = None  # prepare's (reference, fp32) steps
    undo_fault = None  # takes the injected fault out (faults.inject), for tests
    rope = None  # (the transformer's rotary module's name, its tables' sequence dim), for faults.py

    def graphs(self):
        """(graphs torch.compile has made in this process, CUDA graphs recorded), (0, 0) for
        eager: a job during which either grew compiled or recorded inside its Task."""
        if self.engine in (None, "eager"):
            return 0, 0
        from torch._dynamo.utils import counters

        return counters["stats"]["unique_graphs"], self.cuda_graphs.recorded if self.cuda_graphs else 0

    layout = None  # set by apply_layout, for families that offer a choice
    cfg_parallel = None  # parallel.CFGParallel under cfg-2
    parity = None  # parity.figures of the served runtime against eager, set by prepare

    def prepare(self, pipe, layout, engine, warmup_steps):
        """Layout, engine (None: the family has none to choose) and warm-up, with parity before
        ready (parity.py): the first step of the warm-up's call on the reference runtime (eager,
        this device, nothing applied yet), in fp32 block by block (the floor), then served after
        the layout, a fault (faults.py, MEDIAQUAL_PARITY_FAULT, never set by default), the
        engine and a warm-up of warmup_steps (0: none) are in place; raises
        parity.ParityError, naming the engine, layout and figures, when the served step is
        outside the bound. Eager on one device with no fault is the reference itself: no
        served step, and the figures say so."""
        from . import faults, parity

        fault = faults.from_env()
        reference, fp32 = self.parity_runs = self.parity_reference(pipe)
        if layout:
            self.apply_layout(pipe, layout)
        if fault:
            self.undo_fault = faults.inject(fault, self, pipe, self.torch)
            self.log("parity: fault %s injected (%s)" % (fault, faults.ENV))
        if engine is not None:  # None: a family with no engines to choose (MiniMax-H3), eager
            self.apply_engine(pipe, engine)
        if warmup_steps > 0:
            self.warmup(warmup_steps)
        if self.engine and self.engine.startswith("regional-compile"):
            self.keep_compiled_shapes()
        self.parity = self.parity_served(pipe, reference, fp32, fault)
        try:
            parity.verdict(self.parity, self.engine or "eager", layout)
        except parity.ParityError:
            if self.undo_fault:  # the process's patches go with the refused runtime
                self.undo_fault()
                self.undo_fault = None
            raise

    def parity_step(self, pipe, what):
        """StepProbe.run of the warm-up's call, timed in the log."""
        from . import parallel, parity

        t0 = time.perf_counter()
        with self.torch.inference_mode():
            got = parity.StepProbe(pipe, isinstance(self.cfg_parallel, parallel.Branches)).run(self.run_pipe, self.warmup_kwargs(2))
        self.synchronize()
        self.log("parity: %s step took %.1f s" % (what, time.perf_counter() - t0))
        return got

    def parity_reference(self, pipe):
        """The reference runtime's step and the fp32 floor's, before anything is applied."""
        from . import parity

        reference = self.parity_step(pipe, "reference (eager bf16)")
        with parity.FP32(pipe.transformer, self.torch):
            fp32 = self.parity_step(pipe, "fp32 floor (block by block)")
        self.recover()
        return reference, fp32

    def parity_served(self, pipe, reference, fp32, fault=None):
        """parity.figures of the runtime now in place, logged; with no layout, the eager
        engine and no fault it is the reference, and no step runs."""
        from . import parity

        engine, layout = self.engine or "eager", self.layout or "single"
        if engine == "eager" and layout == "single" and not fault:
            served = None
        else:
            served = self.parity_step(pipe, "served (engine %s, layout %s%s)" % (engine, layout, ", fault " + fault if fault else ""))
        fig = parity.figures(reference, served, fp32, "engine %s, layout %s" % (engine, layout) if served is not None else "", fault)
        self.log(parity.summary(fig))
        return fig

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
        try:
            return self.pipe(**kwargs)
        finally:  # a call ended early (cancelled, or parity's one step) says what it computed too
            self.log(cfg.report())

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
                raise RuntimeError(
                    "python module %r is not installed: a GPU host needs torch, torchvision, diffusers, "
                    'transformers and accelerate (README.md, "On a GPU host")' % mod
                )
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
