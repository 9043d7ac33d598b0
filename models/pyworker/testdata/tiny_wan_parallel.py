#!/usr/bin/env python3
"""A tiny real diffusers WanPipeline (random weights, seeded) run by 2 ranks on the CPU with
gloo under a layout of parallel.py, against the same pipeline run alone, for each scenario in
turn within the same two ranks (each on a fresh pipeline; what a run alone computes, the same
for every scenario of its kind, is computed once). Prints one JSON line per scenario
from rank 0: {"scenario", "layout", "equal", "differing", "calls": transformer calls per rank,
"steps"}, or, where the scenario raised, {"scenario", "layout", "errors": per rank, its
"Type: message" or null}; the ranks then go on to the next scenario. Exits 0 once every scenario
is reported, whether it raised or not.

Usage: tiny_wan_parallel.py SCENARIO [SCENARIO ...]
  SCENARIO: one argument, a layout and its flags, e.g. "cfg-2 --break-exchange":
  --break-exchange: cfg-2 without its all_gather (each rank keeps its placeholder), which
  must not give the alone-run's frames: the comparison can fail.
  --odd: a clip of 3 tokens, which 2 ranks cannot split evenly.
  --plain-ulysses: diffusers' even-split Ulysses on 2 ranks instead of parallel.apply's.
  --fused: a bf16 pipeline with Wan's fused kernels (wan/fused.py; run with TRITON_INTERPRET=1)
  put in after the layout, as the adapter does, against the same fused pipeline on one rank;
  the report adds "parity", parity.figures of the layout's first step against eager bf16 on
  one rank, with the fp32 floor.
  --old-processors: with --fused, the fused processors installed as before the fix (plain
  set_processor, dropping the layout's _parallel_config): parity must catch it.
  --fault=NAME: a bf16 pipeline with a wrong runtime of faults.py put in after the layout (as
  MEDIAQUAL_PARITY_FAULT does at load), taken out after the scenario; the report adds
  "parity", as --fused does: parity must catch it.
A scenario that raises on one rank only leaves the ranks out of step (one in a collective the
other never joins): put one that may raise last, as test_ranks.py does with "ulysses-2 --odd
--plain-ulysses", which raises on both ranks at the same point.

diffusers' context parallelism is made to run on a CPU by testing.cpu_context_parallelism.
"""

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # models/

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from pyworker import parallel, testing  # noqa: E402

STEPS = 3


def pipeline(bf16=False):
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
    if bf16:
        # Unit q/k norms over random weights attend almost uniformly, and a uniform average over
        # one rank's shard is close to the whole sequence's: sharper attention, as a trained
        # model's, makes attending over the wrong tokens show.
        with torch.no_grad():
            for block in transformer.blocks:
                block.attn1.norm_q.weight.fill_(4.0)
                block.attn1.norm_k.weight.fill_(4.0)
        transformer.bfloat16()
    return pipe


def fuse(pipe, old_processors=False):
    """Wan's fused kernels in pipe's transformer (wan/fused.py); old_processors: installed the
    way they were before fused.set_processor carried the layout's config over."""
    from pyworker import fused as kernels
    from wan import fused

    if old_processors:
        carry = kernels.set_processor
        kernels.set_processor = lambda module, processor: module.set_processor(processor)
        try:
            return fused.apply(pipe.transformer)
        finally:
            kernels.set_processor = carry
    return fused.apply(pipe.transformer)


SHAPE = {"height": 32, "width": 32, "num_frames": 5}  # 2 latent frames of 2x2 patches: 8 tokens
ODD = {"height": 16, "width": 16, "num_frames": 9}  # 3 latent frames of 1 patch: 3 tokens, odd


def call_kwargs(shape):
    g = torch.Generator().manual_seed(7)
    embeds = torch.randn(1, 6, 32, generator=g)
    negative = torch.randn(1, 6, 32, generator=g)
    return dict(prompt_embeds=embeds, negative_prompt_embeds=negative, **shape, num_inference_steps=STEPS,
                guidance_scale=5.0, output_type="pt", generator=torch.Generator().manual_seed(42))


def generate(pipe, shape, cfg=None):
    if cfg is not None:
        cfg.begin(True)  # guidance 5 and a negative prompt: both branches run
    with torch.inference_mode():
        out = pipe(**call_kwargs(shape))
    return out.frames[0]


def first_step(pipe, shape, cfg=None):
    """parity.StepProbe's (prediction, latents) of the call's first step."""
    from pyworker import parity

    if cfg is not None:
        cfg.begin(True)
    with torch.inference_mode():
        return parity.StepProbe(pipe, isinstance(cfg, parallel.Branches)).run(pipe, call_kwargs(shape))


def counted(transformer):
    """Counts the transformer's real forward calls on this rank."""
    calls = [0]
    forward = transformer.forward

    def f(*a, **k):
        calls[0] += 1
        return forward(*a, **k)

    transformer.forward = f
    return calls


FLAGS = ("--break-exchange", "--odd", "--plain-ulysses", "--fused", "--old-processors")


def parse(scenario):
    """A scenario argument: its layout and its flags, each of FLAGS."""
    layout, *flags = scenario.split()
    unknown = [f for f in flags if f not in FLAGS and not f.startswith("--fault=")]
    if unknown:
        raise SystemExit("scenario %r: unknown flags %s (known: %s)" % (scenario, unknown, ", ".join(FLAGS)))
    return layout, set(flags)


# What a rank computes alone, by what it depends on, computed once for the invocation: every
# pipeline is made from the same seed, so each scenario's fresh pipeline would compute exactly
# these again (the first scenario of each kind computes them, the others reuse them).
_alone = {}


def once(key, compute):
    if key not in _alone:
        _alone[key] = compute()
    return _alone[key]


def run_scenario(rank, layout, flags):
    """One scenario on this rank over a fresh pipeline: rank 0 returns its report."""
    from pyworker import parity

    fused = "--fused" in flags
    fault = next((f.split("=", 1)[1] for f in flags if f.startswith("--fault=")), None)
    checked = fused or fault  # parity figures in the report
    pipe = pipeline(bf16=checked)
    shape = ODD if "--odd" in flags else SHAPE
    key = tuple(sorted(shape.items()))
    if checked:  # the reference runtime on each rank alone, as the adapters' prepare does

        def reference_and_floor():
            reference = first_step(pipe, shape)
            with parity.FP32(pipe.transformer, torch):
                return reference, first_step(pipe, shape)

        def alone_fused_or_not():
            alone_pipe = pipeline(bf16=True)
            if fused:
                fuse(alone_pipe)
            return generate(alone_pipe, shape)

        reference, fp32 = once(("first step, bf16",) + key, reference_and_floor)
        if rank == 0:
            alone = once(("frames, bf16", fused) + key, alone_fused_or_not)
    else:
        alone = once(("frames, fp32",) + key, lambda: generate(pipe, shape)) if rank == 0 else None
    calls = counted(pipe.transformer)
    if "--plain-ulysses" in flags:  # diffusers' even split, without parallel.apply's ulysses_anything
        from diffusers import ContextParallelConfig

        pipe.transformer.enable_parallelism(config=ContextParallelConfig(ulysses_degree=2))
        cfg = None
    else:
        cfg = parallel.apply(pipe, layout, rank, torch)
    if cfg is not None and "--break-exchange" in flags:
        cfg._exchange = lambda cond, uncond: None
    undo = None
    if fault:
        from types import SimpleNamespace

        from pyworker import faults

        undo = faults.inject(fault, SimpleNamespace(rope=("rope", 1)), pipe, torch)
    report = {}
    if fused:
        report["modules"] = fuse(pipe, "--old-processors" in flags)
    if checked:
        report["parity"] = parity.figures(reference, first_step(pipe, shape, cfg), fp32, layout, fault)
        calls[0] = 0  # the transformer calls of the clip below only
    frames = generate(pipe, shape, cfg)
    if undo:
        undo()
    all_calls = [None, None]
    dist.all_gather_object(all_calls, calls[0])
    if rank == 0:
        # A broken exchange leaves uninitialised placeholders, so its frames may hold NaN: count
        # the values that differ (NaN differs from everything) rather than take a maximum.
        report.update({"equal": bool(torch.equal(alone, frames)), "differing": int((alone != frames).sum()),
                       "rel_l2": parity.relative_l2(frames, alone), "nonfinite": int((~torch.isfinite(frames)).sum()),
                       "calls": all_calls, "steps": STEPS})
        return report
    return None


def rank_main(rank, scenarios, store):
    dist.init_process_group("cpu:gloo", init_method="file://" + store, rank=rank, world_size=2)
    testing.cpu_context_parallelism(torch)
    for scenario in scenarios:
        layout, flags = parse(scenario)
        error = None
        try:
            report = run_scenario(rank, layout, flags)
        except Exception as e:  # reported as the scenario's outcome; both ranks go on
            traceback.print_exc()
            report, error = None, "%s: %s" % (type(e).__name__, e)
        errors = [None, None]
        dist.all_gather_object(errors, error)
        if rank == 0:
            out = {"scenario": scenario, "layout": layout}
            out.update({"errors": errors} if any(errors) else report)
            print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def main():
    scenarios = sys.argv[1:]
    if not scenarios:
        raise SystemExit(__doc__)
    for scenario in scenarios:
        parse(scenario)
    import tempfile

    # A file rendezvous: no port to race for with the other tests running beside this one.
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(scenarios, os.path.join(tmp, "store")), nprocs=2)


if __name__ == "__main__":
    main()
