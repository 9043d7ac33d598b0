"""Whether a MiniMax-H3 layout fits this host, from the bundle's configs, before anything loads.

MiniMax-H3's four models are about 130 GiB in bf16 (transformer 61.7 GiB, text encoder 62.1, video
VAE 5.2, audio VAE 0.6 at the released sizes), near a lent H200 host's 128 GiB of memory and its
GPU's 139 GiB. Where the weights go depends on the offload mode (adapter.py's --offload), and every
rank of a layout loads a whole copy (ulysses-N splits the sequence, not the weights):
  auto          diffusers' ComponentsManager first moves every model to host memory and brings
                each to the GPU for its forward: host all of it, GPU the largest model at a time
  text-encoder  the text encoder on the host, the rest resident on the GPU
  none          all of it on the device
(an in-memory L0 bundle turns auto into text-encoder, as the adapter does). plan() computes each
rank's bytes from the models built on the meta device; check() refuses a layout whose ranks'
host bytes exceed the host's available memory, or whose per-rank GPU bytes exceed a GPU's, with a
message naming the figures. The figures are the weights alone: activations come on top.
"""

import os

GIB = 2**30


def model_bytes(bundle):
    """Each model's bytes as load_components(dtype=bf16) gives them (fp32 where the class keeps
    modules in fp32), from the bundle's config.json files, the models built on the meta device."""
    import torch
    from transformers import Qwen3VLConfig

    import build_l0

    out = {}
    for name, cls in build_l0.model_classes().items():
        path = os.path.join(bundle, name)
        with torch.device("meta"):
            if name == "text_encoder":
                m = cls(Qwen3VLConfig.from_pretrained(path))
            else:
                m = cls.from_config(cls.load_config(path))
        out[name] = build_l0.bf16_bytes(m)
    return out


def plan(sizes, offload, ranks):
    """{"host": bytes on the host per rank, "gpu": bytes on a GPU per rank, "ranks": ranks}."""
    total, te = sum(sizes.values()), sizes["text_encoder"]
    if offload == "auto":
        host, gpu = total, max(sizes.values())
    elif offload == "text-encoder":
        host, gpu = te, total - te
    elif offload == "none":
        host, gpu = 0, total
    else:
        raise ValueError("offload %r is not auto, text-encoder or none" % (offload,))
    return {"host": host, "gpu": gpu, "ranks": ranks}


def check(p, layout, offload, host_available, gpu_total):
    """Raises RuntimeError naming the figures when p does not fit: the ranks' host bytes over
    host_available, or a rank's GPU bytes over gpu_total (None: no GPU, the device is the host)."""
    problems = []
    host = p["host"] * p["ranks"] + (0 if gpu_total is not None else p["gpu"] * p["ranks"])
    if host > host_available:
        problems.append("%d rank(s) x %.1f GiB = %.1f GiB of host memory, %.1f GiB available" % (
            p["ranks"], (host / p["ranks"]) / GIB, host / GIB, host_available / GIB))
    if gpu_total is not None and p["gpu"] > gpu_total:
        problems.append("%.1f GiB of weights on each GPU, which holds %.1f GiB" % (p["gpu"] / GIB, gpu_total / GIB))
    if problems:
        raise RuntimeError("layout %s with offload %s cannot fit this host: %s (weights alone; every rank loads a "
                           "whole copy)" % (layout or "single", offload, "; ".join(problems)))


def host_available():
    """MemAvailable of /proc/meminfo, in bytes (Linux)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")
