"""Parity before ready: the served runtime (layout and engine) held to the reference runtime
(eager, this one device, before any layout or engine is applied) on one denoising step.

At load, TorchBackend.prepare runs the first step of the warm-up's call (the row's pinned shape,
seeded latents, both guidance branches, the scheduler step included):
  reference  eager bf16, before any layout or engine
  fp32       the same with the transformer in fp32, block by block (FP32): the noise floor,
             measured on every card whatever its memory
  served     after the layout and the engine are applied and warmed up; eager on one device
             with no fault is the reference itself, and says so instead of comparing
Each run keeps four quantities: the transformer's conditional prediction (its first call of the
step, unguided), its unconditional prediction (the second call, where the step runs two: the
guidance branches), the guided prediction the scheduler was handed (the branches combined as
the pipeline combines them) and the latents the scheduler made of it.

The bound: a correct served runtime is another rounding of the same arithmetic, so on each
prediction it is no farther from fp32 than FLOOR_FACTOR times eager bf16's own distance, and
its latents' largest difference from fp32's is within MAX_ABS_FACTOR times eager bf16's. The
two unguided predictions have the smallest floors (the guidance scale multiplies bf16 rounding
in the guided one), so they see the smallest faults. A guidance branch lost or duplicated
leaves the conditional prediction as it was and moves the unconditional one (to zeros, or to
the conditional prediction: by as far as the two prompts' predictions differ); the guided one
sees it too, except where the pipeline takes most of it away (Qwen-Image-Edit rescales the
guided prediction to the conditional one's norm). A floor over its CEILING says the fp32
reference itself is broken (finite garbage would otherwise widen the bound): refused. The
factors and ceilings are models/spec/parity.json, which the suite reads too.

torch is imported by the caller; this module takes the torch module as an argument.
"""

import functools
import json
import logging
import os

# Parity's contract, shared with the suite (models/spec/parity.go reads the same file).
CONTRACT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "spec", "parity.json")
with open(CONTRACT_FILE) as _f:
    CONTRACT = json.load(_f)
FLOOR_FACTOR = CONTRACT["floor_factor"]  # a prediction's bound: this many times eager bf16's distance to fp32
MAX_ABS_FACTOR = CONTRACT["max_abs_factor"]  # the latents' bound: a largest difference is noisier than an L2 norm
# The largest eager-bf16-to-fp32 distance parity accepts as a floor. Measured on the H200
# (docs/PERFORMANCE.md): guided 5.42 % (Wan2.1), 6.68 % (Wan2.2), 7.32 % (Qwen-Image-Edit);
# unguided, one Wan2.1 forward, 1.46 %. About twice the largest guided one; for the two unguided
# ones, four times the unguided one, room for the L0 bundles' sharp attention and open gates
# (l0.py), whose floors these runs measure. A broken fp32 path lands far above either.
CEILING = CONTRACT["ceiling"]
QUANTITIES = ("cond", "uncond", "guided")
# Each quantity's prefix in the figures (the guided prediction's figures came first and have none).
PREFIX = {"cond": "cond_", "uncond": "uncond_", "guided": ""}
REFERENCE = "eager, one device, before layout and engine"
IS_REFERENCE = "is the reference"


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
    """Keeps the first scheduler step of a pipeline call (the transformer's first and second
    outputs, its model_output and the latents it returned) and ends the call there: a forward
    wrapper and a scheduler.step wrapper for the values, and an exception from the step-end
    callback for the rest, as a cancelled job ends. Raising works for every pipeline with a
    callback_on_step_end, a modular one included (MiniMax-H3's loop calls it from the adapter's
    hook block but has no interrupt flag).

    The pipelines call the transformer for the conditional branch first, then for the
    unconditional one (cache_context "cond", then "uncond"); a step of one call (no guidance
    branches: MiniMax-H3, guidance-distilled) has no unconditional prediction (None).

    deferred: the layout fills a step's outputs only once both branches' calls are in
    (parallel.Branches: cfg-2 hands back a placeholder from the first call), so the first
    output is read again after the second call. Otherwise it is copied at once (a CUDA graph
    replays into the same output buffer for the second call). The second call's output is
    complete when it returns, either way, and copied at once."""

    def __init__(self, pipe, deferred=False):
        self.pipe = pipe
        self.deferred = deferred
        self.got = None

    def run(self, call, kwargs):
        """call(**kwargs) with this probe's hooks; returns {"cond", "uncond", "guided", "latents"}
        of the first step, in fp32 on the device ("uncond" None for a step of one call)."""
        sched, model = self.pipe.scheduler, self.pipe.transformer
        step = sched.step
        own_forward = vars(model).get("forward")  # a layout's or an engine's, if any
        forward = model.forward
        self.got = None
        first = {"calls": 0, "out": None, "copy": None, "uncond": None}

        @functools.wraps(forward)
        def counted(*args, **kw):
            out = forward(*args, **kw)
            if self.got is None:
                first["calls"] += 1
                t = out[0] if isinstance(out, tuple) else out.sample
                if first["calls"] == 1:
                    first["out"], first["copy"] = t, t.float().clone()
                elif first["calls"] == 2:
                    first["uncond"] = t.float().clone()
                    if self.deferred:
                        first["copy"] = first["out"].float().clone()
            return out

        def first_step(model_output, timestep, sample, *args, **kw):
            out = step(model_output, timestep, sample, *args, **kw)
            if self.got is None:
                latents = out[0] if isinstance(out, tuple) else out.prev_sample
                cond = first["copy"] if first["copy"] is not None else model_output.float().clone()
                self.got = {"cond": cond, "uncond": first["uncond"], "guided": model_output.float().clone(),
                            "latents": latents.float().clone()}
            return out

        def stop(p, i, t, cb_kwargs):
            raise _FirstStepTaken()

        sched.step = first_step
        model.forward = counted
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
            if own_forward is None:
                del model.forward
            else:
                model.forward = own_forward
        if self.got is None:
            raise ParityError("parity: the pipeline call made no scheduler step")
        return self.got


class FP32:
    """The transformer in fp32 for the duration of a with block, on any card: its repeated
    blocks (the model's _repeated_blocks, diffusers' own list for regional compiling) are
    upcast one at a time, each just before its forward and back just after, and the rest in
    place for the whole block, so the fp32 weights held at once are one block's and the
    small rest. Floating inputs are cast to fp32 (pipelines hand it bf16 embeddings). Every
    parameter and buffer gets its own dtype back after (bf16 -> fp32 -> bf16 is exact,
    fp32-kept modules stay fp32)."""

    def __init__(self, transformer, torch):
        self.model, self.torch = transformer, torch

    def _upcast(self, tensors):
        kept = []
        for t in tensors:
            if t.is_floating_point() and t.dtype != self.torch.float32:
                kept.append((t, t.dtype))
                t.data = t.data.float()
        return kept

    @staticmethod
    def _restore(kept):
        for t, dtype in kept:
            t.data = t.data.to(dtype)

    def blocks(self):
        names = set(getattr(self.model, "_repeated_blocks", None) or ())
        return [m for m in self.model.modules() if type(m).__name__ in names]

    def __enter__(self):
        torch = self.torch
        blocks = self.blocks()
        inside = {id(t) for b in blocks for t in list(b.parameters()) + list(b.buffers())}
        rest = [t for t in list(self.model.parameters()) + list(self.model.buffers()) if id(t) not in inside]
        self.kept = self._upcast(rest)
        self.hooks = []
        for b in blocks:
            held = {}
            tensors = list(b.parameters()) + list(b.buffers())

            def before(module, args, held=held, tensors=tensors):
                held["kept"] = self._upcast(tensors)

            def after(module, args, out, held=held):
                self._restore(held.pop("kept", []))

            self.hooks.append(b.register_forward_pre_hook(before))
            self.hooks.append(b.register_forward_hook(after))
        self.own_forward = vars(self.model).get("forward")
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
        if self.own_forward is None:
            del self.model.forward
        else:
            self.model.forward = self.own_forward
        for h in self.hooks:
            h.remove()
        self._restore(self.kept)
        return False


def _distances(runs, a, b):
    """{quantity: relative L2 of runs[a] to runs[b]} (None where either has no such quantity: a
    step of one call has no unconditional prediction) and the latents' max abs difference."""
    out = {q: None if runs[a][q] is None or runs[b][q] is None else relative_l2(runs[a][q], runs[b][q]) for q in QUANTITIES}
    out["max_abs"] = max_abs(runs[a]["latents"], runs[b]["latents"])
    return out


def figures(reference, served, fp32, served_as="", fault=None):
    """The parity figures and verdict of served against reference, each StepProbe.run's dict,
    with fp32 the floor; served None: the served runtime is the reference itself (eager, one
    device), which says so instead of a 0. served_as names it; fault, an injected wrong
    runtime (faults.py), is reported with the figures. Where eager's step made one transformer
    call (no unconditional branch) the unconditional figures are null; where it made two, a
    served or fp32 step of one call fails."""
    floor = _distances({"r": reference, "f": fp32}, "r", "f")
    out = {"reference": REFERENCE, "served": served_as or IS_REFERENCE}
    if fault:
        out["fault"] = fault
    if served is None:
        out["served"] = IS_REFERENCE
        for q in QUANTITIES:
            out[PREFIX[q] + "rel_l2"] = None
        out["max_abs"] = None
        far = floor
    else:
        near = _distances({"s": served, "r": reference}, "s", "r")
        for q in QUANTITIES:
            out[PREFIX[q] + "rel_l2"] = near[q]
        out["max_abs"] = near["max_abs"]
        far = _distances({"s": served, "f": fp32}, "s", "f")
    failed = []
    for q in ("guided", "cond", "uncond"):
        key = PREFIX[q]
        if reference[q] is None:  # one call a step: no unconditional branch to measure
            for k in ("fp32_reference", "fp32_served", "bound", "ceiling"):
                out[key + k] = None
            continue
        out[key + "ceiling"] = CEILING[q]
        if floor[q] is None or far[q] is None:
            out[key + "fp32_reference"] = floor[q]
            out[key + "fp32_served"] = far[q]
            out[key + "bound"] = None if floor[q] is None else FLOOR_FACTOR * floor[q]
            failed.append("its step made one transformer call where eager's made two: no %s prediction to hold" % q)
            continue
        out[key + "fp32_reference"] = floor[q]
        out[key + "fp32_served"] = far[q]
        out[key + "bound"] = FLOOR_FACTOR * floor[q]
        if not floor[q] <= CEILING[q]:  # NaN fails too
            failed.append("the %s prediction's floor %.4g is over its ceiling %.4g: the fp32 reference is broken" % (q, floor[q], CEILING[q]))
        elif not far[q] <= out[key + "bound"]:
            failed.append("its %s prediction is %.4g from fp32, eager bf16's is %.4g: over the bound %.4g" % (
                q, far[q], floor[q], out[key + "bound"]))
    out["max_abs_fp32_reference"] = floor["max_abs"]
    out["max_abs_fp32_served"] = far["max_abs"]
    out["max_abs_bound"] = MAX_ABS_FACTOR * floor["max_abs"]
    if not far["max_abs"] <= out["max_abs_bound"]:
        failed.append("its latents are up to %.4g from fp32's, eager bf16's up to %.4g: over the bound %.4g" % (
            far["max_abs"], floor["max_abs"], out["max_abs_bound"]))
    out["bound_of"] = ("to fp32, each prediction <= %g x eager bf16's distance (floor under its ceiling) and the "
                       "latents' max abs <= %g x eager bf16's" % (FLOOR_FACTOR, MAX_ABS_FACTOR))
    out["passed"] = not failed  # False for NaN too: every comparison with NaN is false
    if failed:
        out["failed"] = failed
    return out


def verdict(fig, engine, layout):
    """Raises ParityError naming the engine, layout and figures when fig did not pass."""
    if fig["passed"]:
        return
    raise ParityError("parity: engine %s, layout %s%s differs from eager on one device: %s; %s" % (
        engine, layout or "single", " (fault %s)" % fig["fault"] if fig.get("fault") else "",
        "; ".join(fig["failed"]), summary(fig, verdict=False)))


def _g(v):
    return "null" if v is None else "%.4g" % v


def summary(fig, verdict=True):
    """One log line of the figures."""
    if fig["served"] == IS_REFERENCE:
        near = "served is the reference (%s)" % fig["reference"]
    else:
        near = "against eager: cond %s, uncond %s, guided %s, latents max abs %s" % (
            _g(fig["cond_rel_l2"]), _g(fig.get("uncond_rel_l2")), _g(fig["rel_l2"]), _g(fig["max_abs"]))
    far = ", ".join("%s %s (%s) bound %s" % (q, _g(fig.get(PREFIX[q] + "fp32_served")), _g(fig.get(PREFIX[q] + "fp32_reference")),
                                             _g(fig.get(PREFIX[q] + "bound"))) for q in ("cond", "uncond", "guided"))
    line = "parity: %s; to fp32, served (eager bf16): %s, latents max abs %s (%s) bound %s" % (
        near, far, _g(fig["max_abs_fp32_served"]), _g(fig["max_abs_fp32_reference"]), _g(fig["max_abs_bound"]))
    if verdict:
        line += ": " + ("passed" if fig["passed"] else "FAILED")
    return line
