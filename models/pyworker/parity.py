"""Parity before ready: the served runtime (layout and engine) held to the reference runtime
(eager, this one device, before any layout or engine is applied) on one denoising step.

At load, TorchBackend.prepare runs the first step of the warm-up's call (the row's pinned shape,
seeded latents, both guidance branches, the scheduler step included) three times:
  reference  eager bf16, before any layout or engine
  fp32       the same with the transformer upcast to fp32 in place (and restored bit for bit
             after: bf16 -> fp32 -> bf16 is exact), where it fits the device: the noise floor
  served     after the layout and the engine are applied and warmed up
Each run keeps the guided prediction the scheduler was handed (the transformer's output
combined as the pipeline combines its branches) and the latents the scheduler made of it.

The figures: rel_l2, the served prediction's relative L2 distance to the reference's; max_abs,
the largest absolute difference of the latents after the step; with the floor, fp32_reference
and fp32_served, each path's distance to the fp32 prediction (null without the floor, and
no_fp32 says why). The bound (docs/GPU.md,
"Parity"): a correct served runtime is another rounding of the same arithmetic, so it is no
farther from fp32 than FLOOR_FACTOR times eager bf16's own distance (measured on the H200:
eager 1.46 %, compiled 1.27 %, fused 1.25 % for Wan2.1); without the floor, rel_l2 must stay
under NO_FLOOR_BOUND. A runtime that is wrong (attention over one rank's shard, a guidance
branch lost) moves the prediction by tens of percent, far outside either.

torch is imported by the caller; this module takes the torch module as an argument.
"""

import functools
import logging

FLOOR_FACTOR = 2.0
NO_FLOOR_BOUND = 0.05  # about three times the largest eager-to-fp32 distance measured (1.46 %)
FP32_MARGIN = 1.25  # the fp32 copy must fit the free memory with this much to spare


class ParityError(RuntimeError):
    pass


def relative_l2(got, want):
    """||got - want|| / ||want|| in fp64; NaN anywhere gives NaN (which fails every bound)."""
    got, want = got.double(), want.double()
    den = float(want.norm())
    num = float((got - want).norm())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def max_abs(got, want):
    return float((got.double() - want.double()).abs().max())


class _FirstStepTaken(Exception):
    """Raised by StepProbe's step-end callback to end the call after its first step."""


class StepProbe:
    """Keeps the first scheduler step of a pipeline call (its model_output and the latents it
    returned) and ends the call there: a scheduler.step wrapper for the values, and an
    exception from the step-end callback for the rest, as a cancelled job ends. Raising works
    for every pipeline with a callback_on_step_end, a modular one included (MiniMax-H3's loop
    calls it from the adapter's hook block but has no interrupt flag)."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.got = None

    def run(self, call, kwargs):
        """call(**kwargs) with this probe's hooks; returns (prediction, latents) of the first
        step, in fp32 on the device."""
        sched = self.pipe.scheduler
        step = sched.step
        self.got = None

        def first_step(model_output, timestep, sample, *args, **kw):
            out = step(model_output, timestep, sample, *args, **kw)
            if self.got is None:
                latents = out[0] if isinstance(out, tuple) else out.prev_sample
                self.got = (model_output.float().clone(), latents.float().clone())
            return out

        def stop(p, i, t, cb_kwargs):
            raise _FirstStepTaken()

        sched.step = first_step
        # A modular pipeline logs every exception through its blocks, with tracebacks, as an
        # error: not this deliberate one.
        modular = logging.getLogger("diffusers.modular_pipelines")
        level = modular.level
        modular.setLevel(logging.CRITICAL)
        try:
            call(**dict(kwargs, callback_on_step_end=stop))
        except _FirstStepTaken:
            pass
        finally:
            modular.setLevel(level)
            del sched.step  # the instance attribute goes; the class's method is back
        if self.got is None:
            raise ParityError("parity: the pipeline call made no scheduler step")
        return self.got


class FP32:
    """The transformer upcast to fp32 in place for the duration of a with block, its floating
    inputs cast to fp32 (pipelines hand it bf16 embeddings); every parameter and buffer gets its
    own dtype back after (bf16 -> fp32 -> bf16 is exact, fp32-kept modules stay fp32)."""

    def __init__(self, transformer, torch):
        self.model, self.torch = transformer, torch

    def __enter__(self):
        torch = self.torch
        self.dtypes = []
        for t in list(self.model.parameters()) + list(self.model.buffers()):
            self.dtypes.append((t, t.dtype))
            if t.is_floating_point():
                t.data = t.data.float()
        forward = self.model.forward

        # wraps: inspect.signature(forward) stays the model's (MiniMax-H3's denoiser passes only
        # the keyword arguments it lists).
        @functools.wraps(forward)
        def upcast(*args, **kwargs):
            cast = lambda v: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa: E731
            return forward(*[cast(a) for a in args], **{k: cast(v) for k, v in kwargs.items()})

        self.model.forward = upcast
        return self

    def __exit__(self, *exc):
        del self.model.forward
        for t, dtype in self.dtypes:
            if t.dtype != dtype:
                t.data = t.data.to(dtype)
        return False


def fp32_fits(transformer, device, torch):
    """(fits, why): whether an fp32 copy of the transformer's bf16 weights fits the device's
    free memory now (the bf16 tensors are freed as each is upcast, so the extra is their size
    again), with FP32_MARGIN to spare."""
    tensors = list(transformer.parameters()) + list(transformer.buffers())
    extra = sum(t.numel() * 2 for t in tensors if t.dtype in (torch.bfloat16, torch.float16))
    device = torch.device(device)
    away = {str(t.device) for t in tensors if t.device.type != device.type}
    if away:
        # Offloaded (MiniMax-H3's auto offload keeps it on the host between calls): the upcast
        # would double it where it lives, in host memory.
        return False, "the transformer is offloaded to %s, not on %s" % (", ".join(sorted(away)), device)
    if device.type != "cuda":
        return True, ""
    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if extra * FP32_MARGIN > free:
        return False, "the fp32 transformer needs %.1f GiB more (%.1f with the %.2fx margin for the step), %.1f GiB free" % (
            extra / 2**30, extra * FP32_MARGIN / 2**30, FP32_MARGIN, free / 2**30)
    return True, ""


def figures(reference, served, fp32=None, fp32_why=""):
    """The parity figures and verdict of served against reference (each (prediction, latents)),
    with the fp32 floor where it was measured."""
    out = {
        "reference": "eager, one device, before layout and engine",
        "rel_l2": relative_l2(served[0], reference[0]),
        "max_abs": max_abs(served[1], reference[1]),
    }
    if fp32 is not None:
        out["fp32_reference"] = relative_l2(reference[0], fp32[0])
        out["fp32_served"] = relative_l2(served[0], fp32[0])
        out["bound"] = FLOOR_FACTOR * out["fp32_reference"]
        out["bound_of"] = "fp32_served <= %g x fp32_reference" % FLOOR_FACTOR
        passed = out["fp32_served"] <= out["bound"]
    else:
        out["fp32_reference"] = out["fp32_served"] = None
        out["no_fp32"] = fp32_why
        out["bound"] = NO_FLOOR_BOUND
        out["bound_of"] = "rel_l2 <= %g (no fp32 floor: %s)" % (NO_FLOOR_BOUND, fp32_why)
        passed = out["rel_l2"] <= NO_FLOOR_BOUND
    out["passed"] = bool(passed)  # False for NaN too: every comparison with NaN is false
    return out


def verdict(fig, engine, layout):
    """Raises ParityError naming the engine, layout and figure when fig did not pass."""
    if fig["passed"]:
        return
    if fig["fp32_served"] is not None:
        what = "its prediction is %.4g from fp32, eager bf16's is %.4g: over the bound %.4g (%s)" % (
            fig["fp32_served"], fig["fp32_reference"], fig["bound"], fig["bound_of"])
    else:
        what = "its prediction is %.4g from eager's, over the bound %.4g (%s)" % (fig["rel_l2"], fig["bound"], fig["bound_of"])
    raise ParityError("parity: engine %s, layout %s differs from eager on one device: %s; rel_l2 %.4g, max_abs %.4g" % (
        engine, layout or "single", what, fig["rel_l2"], fig["max_abs"]))


def summary(fig):
    """One log line of the figures."""
    tail = ("; to fp32: reference %.4g, served %.4g" % (fig["fp32_reference"], fig["fp32_served"])) \
        if fig["fp32_served"] is not None else "; no fp32 floor (%s)" % fig.get("no_fp32")
    return "parity: rel_l2 %.4g, max_abs %.4g against eager%s; bound %.4g: %s" % (
        fig["rel_l2"], fig["max_abs"], tail, fig["bound"], "passed" if fig["passed"] else "FAILED")
