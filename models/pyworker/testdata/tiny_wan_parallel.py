#!/usr/bin/env python3
"""A tiny real diffusers WanPipeline (random weights, seeded) run by 2 ranks on the CPU with
gloo under a layout of parallel.py, against the same pipeline run alone. Prints one JSON line
from rank 0: {"layout", "equal", "differing", "calls": transformer calls per rank, "steps"}.

Usage: tiny_wan_parallel.py LAYOUT [--break-exchange] [--odd] [--plain-ulysses]
  --break-exchange: cfg-2 without its all_gather (each rank keeps its placeholder), which
  must not give the alone-run's frames: the comparison can fail.
  --odd: a clip of 3 tokens, which 2 ranks cannot split evenly.
  --plain-ulysses: diffusers' even-split Ulysses on 2 ranks instead of parallel.apply's.

Two things make diffusers 0.42.1's context parallelism run on a CPU at all, both patched here
only (never in the adapters): enable_parallelism divides the rank by
torch.accelerator.device_count(), 0 without a GPU; and its context-parallel hook warns through
logger.warning_once, which exists only once transformers has been imported.
"""

import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # models/

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from pyworker import parallel  # noqa: E402

STEPS = 3


def pipeline():
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                        in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                                        num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        rope_max_seq_len=32)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=transformer, vae=vae, scheduler=scheduler)
    pipe.set_progress_bar_config(disable=True)
    return pipe


SHAPE = {"height": 32, "width": 32, "num_frames": 5}  # 2 latent frames of 2x2 patches: 8 tokens
ODD = {"height": 16, "width": 16, "num_frames": 9}  # 3 latent frames of 1 patch: 3 tokens, odd


def generate(pipe, shape):
    g = torch.Generator().manual_seed(7)
    embeds = torch.randn(1, 6, 32, generator=g)
    negative = torch.randn(1, 6, 32, generator=g)
    with torch.inference_mode():
        out = pipe(prompt_embeds=embeds, negative_prompt_embeds=negative, **shape,
                   num_inference_steps=STEPS, guidance_scale=5.0, output_type="pt",
                   generator=torch.Generator().manual_seed(42))
    return out.frames[0]


def counted(transformer):
    """Counts the transformer's real forward calls on this rank."""
    calls = [0]
    forward = transformer.forward

    def f(*a, **k):
        calls[0] += 1
        return forward(*a, **k)

    transformer.forward = f
    return calls


def rank_main(rank, layout, store, broken, odd, plain):
    dist.init_process_group("cpu:gloo", init_method="file://" + store, rank=rank, world_size=2)
    torch.accelerator.device_count = lambda: 1
    logging.Logger.warning_once = logging.Logger.warning
    pipe = pipeline()
    shape = ODD if odd else SHAPE
    alone = generate(pipe, shape) if rank == 0 else None
    calls = counted(pipe.transformer)
    if plain:  # diffusers' even split, without parallel.apply's ulysses_anything
        from diffusers import ContextParallelConfig

        pipe.transformer.enable_parallelism(config=ContextParallelConfig(ulysses_degree=2))
        cfg = None
    else:
        cfg = parallel.apply(pipe, layout, rank, torch)
    if cfg is not None:
        cfg.begin(True)  # guidance 5 and a negative prompt: both branches run
        if broken:
            cfg._exchange = lambda cond, uncond: None
    frames = generate(pipe, shape)
    all_calls = [None, None]
    dist.all_gather_object(all_calls, calls[0])
    if rank == 0:
        # A broken exchange leaves uninitialised placeholders, so its frames may hold NaN: count
        # the values that differ (NaN differs from everything) rather than take a maximum.
        print(json.dumps({"layout": layout, "equal": bool(torch.equal(alone, frames)),
                          "differing": int((alone != frames).sum()), "calls": all_calls, "steps": STEPS}),
              flush=True)
    dist.destroy_process_group()


def main():
    layout = sys.argv[1]
    broken = "--break-exchange" in sys.argv[2:]
    odd = "--odd" in sys.argv[2:]
    plain = "--plain-ulysses" in sys.argv[2:]
    import tempfile

    # A file rendezvous: no port to race for with the other tests running beside this one.
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(layout, os.path.join(tmp, "store"), broken, odd, plain), nprocs=2)


if __name__ == "__main__":
    main()
