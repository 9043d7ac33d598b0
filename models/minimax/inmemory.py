"""MiniMax-H3's in-memory L0 weights (adapter.py loads them for a config-only L0 bundle).

The real MiniMax-H3 is about 134 GiB of weights, more than the lent device's 64 GB disk, so its L0 bundle holds the configs alone, and its
L0-RANDOM.txt marker has an "IN-MEMORY WEIGHTS (seed N)" line. For such a bundle (and only when no
model folder holds weight files) the loader builds the four models from their config.json:
parameters on the meta device, then materialised on DEV in their loaded dtype (bf16, fp32 where the
class's _keep_in_fp32_modules says, matched as diffusers matches them), buffers (rotary inv_freq,
filters) computed on the CPU by the constructors and copied over, every transformer and text-encoder
parameter drawn from N(0, INIT_STD) by a generator on DEV seeded with N; the VAEs are constructed on
DEV with their default init (under torch.manual_seed(N)), as every L0 bundle here keeps them. The
tokenizer, processor and schedulers load from the bundle as usual; pipe.update_components puts the
models in. Memory at the real sizes: transformer 61.7 GiB, text encoder 62.1 GiB, video VAE
5.2 GiB, audio VAE 0.6 GiB as loaded; "auto" keeps all but the text encoder on the GPU (67.5 GiB)
and the text encoder's copy in host memory (62.1 GiB; it is parked there as soon as it is drawn,
before the transformer is), because the ComponentsManager would first move all 129.6 GiB to the
CPU, more than the 128 GiB a lent H200 host has.
"""

import os

import build_l0
from pyworker import l0


def in_memory_seed(bundle):
    """The seed of an in-memory L0 bundle (its marker's IN-MEMORY line, no weight files), or None
    for a bundle that holds its weights. Raises where the two disagree or a model's config.json
    is missing: that bundle cannot load, and saying which file is wrong beats a diffusers trace."""
    marker = os.path.join(bundle, l0.MARKER)
    if not os.path.isfile(marker):
        return None
    with open(marker) as f:
        seed = build_l0.in_memory_seed(f.read())
    if seed is None:
        return None
    missing = [os.path.join(bundle, name, "config.json") for name in build_l0.MODELS
               if not os.path.isfile(os.path.join(bundle, name, "config.json"))]
    if missing:
        raise RuntimeError(
            "config-only L0 bundle %s (%s says its weights are drawn at load) lacks %s; rebuild it with "
            "models/minimax/build_l0.py" % (bundle, l0.MARKER, ", ".join(missing)))
    held = ["%s/%s" % (name, ", ".join(build_l0.weight_files(os.path.join(bundle, name))))
            for name in build_l0.MODELS if build_l0.weight_files(os.path.join(bundle, name))]
    if held:
        raise RuntimeError(
            "bundle %s: %s says its weights are drawn at load, but it holds weight files (%s); rebuild it "
            "with models/minimax/build_l0.py" % (bundle, l0.MARKER, "; ".join(held)))
    return seed


def loaded_dtype(name, keep, dtype, torch):
    """The dtype a load_components(dtype=dtype) gives a parameter or persistent buffer: float32
    where a segment of its name is one of the class's _keep_in_fp32_modules (diffusers'
    load_model_dict_into_meta rule; transformers' Qwen3-VL keeps none), else dtype."""
    return torch.float32 if any(k in name.split(".") for k in keep) else dtype


def materialize(model, device, dtype, generator, std, torch):
    """A model whose parameters are on the meta device and whose buffers were computed on the
    CPU by its constructor (accelerate's init_empty_weights(include_buffers=False)): parameters
    and persistent floating buffers set to their loaded dtype while still on meta (so the device
    only ever holds them at that size), storage made on device (to_empty), the constructor's
    buffers copied back (to_empty leaves them uninitialised), and every parameter drawn from
    N(0, std) with generator, in named_parameters order. Returns the number of parameters."""
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    persistent = {n for n, _ in model.named_buffers()} - {
        (mod_name + "." if mod_name else "") + b for mod_name, mod in model.named_modules()
        for b in getattr(mod, "_non_persistent_buffers_set", ())}
    buffers = {}
    for name, buf in model.named_buffers():
        if buf.is_floating_point() and name in persistent:
            buf = buf.to(loaded_dtype(name, keep, dtype, torch))
        buffers[name] = buf.detach().clone()
    for mod_name, mod in model.named_modules():
        for pname, prm in list(mod._parameters.items()):
            if prm is None:
                continue
            full = (mod_name + "." if mod_name else "") + pname
            want = loaded_dtype(full, keep, dtype, torch) if prm.is_floating_point() else prm.dtype
            if prm.dtype != want:
                mod._parameters[pname] = torch.nn.Parameter(prm.data.to(want), requires_grad=prm.requires_grad)
        for bname, buf in list(mod._buffers.items()):
            full = (mod_name + "." if mod_name else "") + bname
            if buf is not None and full in buffers and buf.dtype != buffers[full].dtype:
                mod._buffers[bname] = buf.to(buffers[full].dtype)
    model.to_empty(device=device)
    n = 0
    with torch.no_grad():
        for name, buf in model.named_buffers():
            buf.copy_(buffers[name])
        for _, prm in model.named_parameters():
            prm.normal_(0.0, std, generator=generator)
            n += prm.numel()
    return n


def build_in_memory(bundle, device, seed, torch, drawn=None):
    """The four models of an in-memory L0 bundle, built from its configs on device (see the module
    docstring). Returns ({name: model}, {name: parameters}). Order: the VAEs first (constructed on
    the device in fp32, then cast: their transient 10 GiB fp32 copy comes before the 124 GiB of
    the others), then the text encoder and the transformer from one generator. drawn(name, model),
    if given, is called as each model is done (the text-encoder offload parks it there)."""
    from accelerate import init_empty_weights
    from transformers import Qwen3VLConfig

    classes = build_l0.model_classes()
    device = torch.device(device)
    models, sizes = {}, {}
    torch.manual_seed(seed)  # the VAEs' default init
    for name in ("vae", "audio_vae"):
        cls = classes[name]
        config = cls.load_config(os.path.join(bundle, name))
        with device:
            m = cls.from_config(config)
        # Buffers as a load gives them: computed on the CPU (diffusers builds a model under
        # init_empty_weights(include_buffers=False) and loads into it), not on the device.
        with init_empty_weights(include_buffers=False):
            ref = dict(cls.from_config(config).named_buffers())
        keep = getattr(m, "_keep_in_fp32_modules", None) or []
        with torch.no_grad():
            for bname, buf in m.named_buffers():
                buf.copy_(ref[bname])
            for pname, prm in m.named_parameters():
                prm.data = prm.data.to(loaded_dtype(pname, keep, torch.bfloat16, torch))
        models[name], sizes[name] = m.eval(), sum(p.numel() for p in m.parameters())
    generator = torch.Generator(device=device).manual_seed(seed)
    for name in ("text_encoder", "transformer"):
        cls = classes[name]
        path = os.path.join(bundle, name)
        with init_empty_weights(include_buffers=False):
            if name == "text_encoder":
                m = cls(Qwen3VLConfig.from_pretrained(path))
            else:
                m = cls.from_config(cls.load_config(path))
        sizes[name] = materialize(m, device, torch.bfloat16, generator, l0.INIT_STD, torch)
        models[name] = m.eval()
        if drawn is not None:
            drawn(name, m)
    return models, sizes
