"""Wrong runtimes parity must refuse (parity.py), injected at load: MEDIAQUAL_PARITY_FAULT
names one (never set by default); TorchBackend.prepare puts it in after the layout, before the
engine, so the served step runs it and parity refuses the worker with its figures. Each is a
bug a fast runtime can have while every output still looks like a picture:

  attention-half     each query attends over its own half of the sequence only: what a
                     ulysses-2 layout that lost its all-to-all computes
  branch-duplicated  the uncond branch hands back the cond branch's output: a cfg-2 exchange
                     that copied one rank's output to both
  branch-lost        the uncond branch hands back zeros: a cfg-2 exchange that never arrived
  rope-shifted       the rotary positions shifted by one token
  fused-scale        the family's fused q/k norm and RoPE kernel (fused.py) with its output
                     FUSED_SCALE times too large: a norm whose mean divides by twice the
                     values it summed

inject(name, backend, pipe, torch) puts one in and returns what takes it out again (the GPU's
parity-faults run, scripts/gpu-runs/faults.py, measures them one after the other on one load).
A family that cannot have one (no rotary module, no fused kernels) refuses it by name.
"""

import os

ENV = "MEDIAQUAL_PARITY_FAULT"
FUSED_SCALE = 2 ** 0.5  # rsqrt(sum / (2 n)) for rsqrt(sum / n)


def _attention_half(backend, pipe, torch):
    """torch's scaled_dot_product_attention, which diffusers' native attention calls, over
    each half of the sequence on its own where queries and keys are one sequence (self- and
    joint attention; cross-attention is left alone)."""
    F = torch.nn.functional
    sdpa = F.scaled_dot_product_attention

    def halves(query, key, value, attn_mask=None, *args, **kwargs):
        n = query.shape[-2]
        if key.shape[-2] != n or n < 2:
            return sdpa(query, key, value, attn_mask, *args, **kwargs)
        outs = []
        for a, b in ((0, n // 2), (n // 2, n)):
            mask = attn_mask[..., a:b, a:b] if attn_mask is not None and attn_mask.dim() >= 2 else attn_mask
            outs.append(sdpa(query[..., a:b, :], key[..., a:b, :], value[..., a:b, :], mask, *args, **kwargs))
        return torch.cat(outs, dim=-2)

    F.scaled_dot_product_attention = halves

    def undo():
        F.scaled_dot_product_attention = sdpa

    return undo


def _branch(lost):
    def inject(backend, pipe, torch):
        """The uncond branch's output replaced (the pipelines name each branch with
        transformer.cache_context, "cond" first)."""
        model = pipe.transformer
        own = {k: vars(model).get(k) for k in ("forward", "cache_context")}
        forward, context = model.forward, model.cache_context
        state = {"branch": None, "cond": None}

        def cache_context(name, *args, **kwargs):
            state["branch"] = name
            return context(name, *args, **kwargs)

        def wrong(*args, **kwargs):
            out = forward(*args, **kwargs)
            t = out[0] if isinstance(out, tuple) else out.sample
            if state["branch"] == "cond":
                state["cond"] = t
            elif state["branch"] == "uncond" and state["cond"] is not None:
                t.copy_(torch.zeros_like(t) if lost else state["cond"])
            return out

        model.cache_context, model.forward = cache_context, wrong

        def undo():
            for k, v in own.items():
                if v is None:
                    delattr(model, k)
                else:
                    setattr(model, k, v)

        return undo

    return inject


def _rope_shifted(backend, pipe, torch):
    """The family's rotary module (its rope attribute: (module name, sequence dim)) hands
    every table back rolled by one token along the sequence."""
    if not backend.rope:
        raise RuntimeError("fault rope-shifted: this family names no rotary module")
    name, dim = backend.rope
    module = getattr(pipe.transformer, name)

    def shifted(mod, args, out):
        return tuple(torch.roll(t, 1, dims=dim) for t in out)

    return module.register_forward_hook(shifted).remove


def _fused_scale(backend, pipe, torch):
    """The family's fused kernels put in (as regional-compile-fused does, where the engine did
    not already), with the q/k norm and RoPE kernel's output FUSED_SCALE times too large."""
    if backend.fused_module is None:
        raise RuntimeError("fault fused-scale: this family has no fused kernels")
    from . import fused

    norm_rope = fused.norm_rope

    def wrong(*args, **kwargs):
        return norm_rope(*args, **kwargs) * FUSED_SCALE

    fused.norm_rope = wrong
    if "-fused" not in (backend.engine or ""):
        backend.fuse_kernels(pipe)

    def undo():
        fused.norm_rope = norm_rope

    return undo


FAULTS = {
    "attention-half": _attention_half,
    "branch-duplicated": _branch(lost=False),
    "branch-lost": _branch(lost=True),
    "rope-shifted": _rope_shifted,
    "fused-scale": _fused_scale,
}


def from_env():
    """The fault MEDIAQUAL_PARITY_FAULT names, or None; an unknown name is refused."""
    name = os.environ.get(ENV, "")
    if name and name not in FAULTS:
        raise RuntimeError("%s=%r is not a fault; faults: %s" % (ENV, name, ", ".join(FAULTS)))
    return name or None


def inject(name, backend, pipe, torch):
    """Puts fault name into pipe's runtime; returns the function that takes it out."""
    return FAULTS[name](backend, pipe, torch)
