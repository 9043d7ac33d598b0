#!/usr/bin/env python3
"""Build an L0-random MiniMax-H3 bundle: the real architecture, CONFIGS ONLY, no weight files.

A real MiniMax-H3 snapshot is about 134 GiB (the 33 B transformer alone is 61.7 GiB of bf16, the
Qwen3-VL-32B text encoder as much again); the lent device's 64 GB disk cannot hold even one of
the two, and writing random weights to disk only to read them back proves nothing. So this
bundle holds what a diffusers modular snapshot holds *except* the weights:

  <out>/MiniMaxAI/MiniMax-H3/
    modular_model_index.json     MiniMaxH3ModularPipeline's component specs (t2va components)
    transformer/config.json      MiniMaxH3Transformer3DModel, the released sizes (33.12 B)
    text_encoder/config.json     Qwen3VLForConditionalGeneration, Qwen3-VL-32B's sizes
    vae/config.json              AutoencoderKLMiniMaxH3 (16x spatial, 17-frame chunks of 5 latents, 24 ch)
    audio_vae/config.json        AutoencoderKLMiniMaxH3Audio (32 kHz, 40 latents/s, 32 ch)
    scheduler/, audio_scheduler/ MiniMaxH3Scheduler, shift 12 (video) and 3 (audio)
    tokenizer/, processor/       a byte-level Qwen2 tokenizer and a Qwen3VLProcessor, made in code
    L0-RANDOM.txt                the marker (models/pyworker/l0.py), with the IN-MEMORY line below

and models/minimax/adapter.py, seeing the IN-MEMORY line and no weight files, builds every model
from these configs at load: parameters on the meta device, materialised on the GPU, drawn there
from N(0, INIT_STD) with a seeded generator (the VAEs keep their default init, as in every L0
bundle here), bf16 except each class's _keep_in_fp32_modules. Nothing of the weights touches disk.

  python3 models/minimax/build_l0.py --out $MEDIAQUAL_BUNDLES            # the real sizes
  python3 models/minimax/build_l0.py --out /tmp/b --tiny                 # tiny dims (CPU tests)
  python3 models/minimax/build_l0.py --out /tmp/b --dry-run              # print configs + counts

--dry-run writes nothing; it instantiates every model on torch's meta device (no memory, no time)
to count its parameters. The configuration code is importable without torch.
"""

import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import l0  # noqa: E402
from pyworker.l0 import INIT_STD  # noqa: E402

BUNDLE = "MiniMaxAI/MiniMax-H3"  # the inventory row's Bundle (models/minimax/minimax.go)
CHECKPOINT = "MiniMaxAI/MiniMax-H3 (revision 48d93ede)"
BUILDER = "models/minimax/build_l0.py"

# The models the t2va workflow loads; each is a config.json here and nothing else.
MODELS = ("transformer", "text_encoder", "vae", "audio_vae")
# What their weights would be named in a snapshot (diffusers or transformers, sharded or not).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json")

# The marker's machine-readable line (adapter.py reads it): the weights are drawn at load.
IN_MEMORY = "IN-MEMORY WEIGHTS"
IN_MEMORY_LINE = (IN_MEMORY + " (seed %d): this bundle holds no weight files; models/minimax/adapter.py "
                  "builds every model from its config at load and draws its weights on the device.")
_IN_MEMORY_RE = re.compile(r"^" + re.escape(IN_MEMORY) + r" \(seed (-?\d+)\)", re.M)


def in_memory_seed(marker_text):
    """The seed of a marker's IN-MEMORY line, or None where it has none."""
    m = _IN_MEMORY_RE.search(marker_text or "")
    return int(m.group(1)) if m else None


def weight_files(component_dir):
    """The weight files (any format) in one component folder."""
    if not os.path.isdir(component_dir):
        return []
    return sorted(f for f in os.listdir(component_dir) if f.endswith(WEIGHT_SUFFIXES))


# ---------------------------------------------------------------------------------------------
# Configurations (pure)


def transformer_config(tiny=False):
    """MiniMaxH3Transformer3DModel kwargs. The real ones are the class's defaults in diffusers
    0.42.1, which are field for field the MINIMAX_H3_TRANSFORMER_CONFIG of diffusers'
    scripts/convert_minimax_h3_to_diffusers.py (the conversion of the released checkpoint):
    56 heads x 128, hidden 5376, 50 blocks + 2 refiner blocks, SwiGLU 14336, 24 video / 32 audio
    latent channels, patch (1, 2, 2), text_dim 5120 (= Qwen3-VL-32B's hidden size)."""
    if tiny:
        # As test_adapter.build_tiny_bundle: 3 axes x 2 x rope_freq_dim = 12 rotary channels of a
        # 16-wide head.
        return {"num_attention_heads": 2, "attention_head_dim": 16, "hidden_size": 32, "num_layers": 1,
                "num_refiner_layers": 1, "ffn_dim": 32, "in_channels": 4, "audio_in_channels": 4,
                "patch_size": [1, 2, 2], "text_dim": 16, "freq_dim": 16, "time_embed_hidden_dim": 16,
                "time_embed_dim": 16, "rope_freq_dim": 2, "rope_theta": 10000.0, "norm_eps": 1e-5,
                "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5}
    return {"num_attention_heads": 56, "attention_head_dim": 128, "hidden_size": 5376, "num_layers": 50,
            "num_refiner_layers": 2, "ffn_dim": 14336, "in_channels": 24, "audio_in_channels": 32,
            "patch_size": [1, 2, 2], "text_dim": 5120, "freq_dim": 256, "time_embed_hidden_dim": 5376,
            "time_embed_dim": 2688, "rope_freq_dim": 16, "rope_theta": 10000.0, "norm_eps": 1e-5,
            "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5}


# Qwen3-VL-32B (the MiniMax-H3 text encoder, text_encoder/ of the release). Where each number
# comes from (no network here, so nothing was read off the Hub itself):
#  - text 5120 hidden / 64 layers / 25600 intermediate / 64 heads / 8 KV heads / head_dim 128, and
#    vision depth 27 / hidden 1152 / intermediate 4304 / 16 heads / out_hidden_size 5120 / patch 16 /
#    temporal patch 2 / spatial merge 2: the values a public MiniMax-H3 weight-contract script
#    (xLLM's) asserts against the release's text_encoder/config.json. text 5120/64/25600/64/8/128
#    and vocab 151936 are also Qwen3-32B's published config.
#  - vision hidden_act gelu_pytorch_tanh, num_position_embeddings 2304, deepstack [8, 16, 24]:
#    transformers 5.17's Qwen3VLVisionConfig defaults, which the 8B and larger Qwen3-VL configs
#    keep (the 2B/4B ones differ); NOT checked against the 32B file itself.
#  - rope theta 5e6, mrope_section [24, 20, 20] interleaved, max_position_embeddings 262144,
#    rms_norm_eps 1e-6: the published Qwen3-VL configs (2B..8B seen in public code) and an MLX port
#    of the MiniMax-H3 text encoder; NOT checked against the 32B file itself. transformers 5.17
#    always interleaves Qwen3-VL's mrope (mrope_interleaved is recorded, not read).
#  - tie_word_embeddings false: as Qwen3-32B and Qwen3-VL-8B (only 2B/4B tie); NOT checked against
#    the 32B file. It decides whether lm_head is a second 151936 x 5120 matrix (0.78 B params).
#  - the special-token ids are the made-in-code tokenizer's, not Qwen's 151652..151656 (the t2va
#    prompt is tokenised verbatim, with no special or vision tokens, so no id is ever looked up).
QWEN3_VL_32B_TEXT = {
    "vocab_size": 151936, "hidden_size": 5120, "intermediate_size": 25600, "num_hidden_layers": 64,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu",
    "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "attention_bias": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                        "mrope_interleaved": True},
}
QWEN3_VL_32B_VISION = {
    "depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh", "intermediate_size": 4304,
    "num_heads": 16, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
    "out_hidden_size": 5120, "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
}


def text_encoder_config(token_ids, tiny=False):
    """Qwen3VLConfig kwargs; token_ids maps the four vision tokens to the tokenizer's ids. The
    pipeline reads hidden_states[50], so the text stack needs more than 50 layers even tiny."""
    text, vision = dict(QWEN3_VL_32B_TEXT), dict(QWEN3_VL_32B_VISION)
    if tiny:
        text.update(hidden_size=16, intermediate_size=32, num_hidden_layers=51, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=8, vocab_size=1024, max_position_embeddings=4096,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1],
                                     "mrope_interleaved": True})
        vision.update(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=16,
                      deepstack_visual_indexes=[0], num_position_embeddings=64)
    return {
        "text_config": text,
        "vision_config": vision,
        "image_token_id": token_ids["<|image_pad|>"],
        "video_token_id": token_ids["<|video_pad|>"],
        "vision_start_token_id": token_ids["<|vision_start|>"],
        "vision_end_token_id": token_ids["<|vision_end|>"],
        "tie_word_embeddings": False,
    }


def vae_config(tiny=False):
    """AutoencoderKLMiniMaxH3 kwargs. The real ones are the class defaults of diffusers 0.42.1,
    field for field the conversion script's MINIMAX_H3_VIDEO_VAE_CONFIG: 6 levels (128..1024
    channels) with spatial factors 2,2,2,2,1,1 (16x) and temporal 1,2,2,1,1,1 (4x), a 36-layer
    ViT decoder, clip_length 17 and token_drop 3 (17n+5 frames -> 5n+2 latents), 24 latent
    channels (= the transformer's in_channels). latents_mean/std are the release's
    video_vae/config.json values, which are not here: zeros and ones (random weights either way)."""
    cfg = {
        "in_channels": 3, "out_channels": 3, "latent_channels": 24,
        "block_out_channels": [128, 256, 256, 512, 512, 1024], "layers_per_block": 2,
        "spatial_downsample_factors": [2, 2, 2, 2, 1, 1], "temporal_downsample_factors": [1, 2, 2, 1, 1, 1],
        "norm_num_groups": 32, "norm_eps": 1e-6, "spatial_padding_mode": "reflect",
        "decoder_num_layers": 36, "decoder_num_attention_heads": 32, "decoder_attention_head_dim": 64,
        "decoder_num_register_tokens": 4, "decoder_ffn_mult": 4, "decoder_rope_theta": 100.0,
        "decoder_rope_dim_ratio": 0.75, "decoder_norm_eps": 1e-5, "clip_length": 17, "token_drop": 3,
    }
    if tiny:
        # The geometry that matters is kept (16x spatial, 4x temporal, 17-frame chunks of 5).
        cfg.update(latent_channels=4, block_out_channels=[8] * 6, layers_per_block=1, norm_num_groups=4,
                   decoder_num_layers=1, decoder_num_attention_heads=2, decoder_attention_head_dim=8)
    n = cfg["latent_channels"]
    cfg.update(latents_mean=[0.0] * n, latents_std=[1.0] * n)
    return cfg


def audio_vae_config(tiny=False):
    """AutoencoderKLMiniMaxH3Audio kwargs. The real ones are the class defaults of diffusers
    0.42.1: 32 kHz, encoder rates 2,4,4,5,5 (hop 800: the 40 latents/s the pipeline assumes),
    32 latent channels (= the transformer's audio_in_channels), BigVGAN decoder rates 5,5,2,2,2,2,2
    with kernels 2u or 2u-1 (the conversion script's rule), resblocks 3/7/11 x dilations 1,3,5 and
    8 attention heads (the script's fixed values). The release reads encoder_dim, latent_dim and
    decoder_dim from its audio_vae/metadata.json, which is not here: the defaults (64, 2048, 1024)
    are taken as the released ones, unverified. latents_mean/std: zeros and ones."""
    cfg = {
        "encoder_dim": 64, "encoder_rates": [2, 4, 4, 5, 5], "latent_dim": 2048, "latent_channels": 32,
        "num_attention_heads": 8, "decoder_dim": 1024, "decoder_rates": [5, 5, 2, 2, 2, 2, 2],
        "decoder_kernel_sizes": [9, 9, 4, 4, 4, 4, 4], "resblock_kernel_sizes": [3, 7, 11],
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "sampling_rate": 32000,
    }
    if tiny:
        # As build_tiny_bundle: 160 Hz over hop 4 is the same 40 latents/s.
        cfg.update(encoder_dim=4, encoder_rates=[2, 2], latent_dim=8, latent_channels=4, num_attention_heads=2,
                   decoder_dim=8, decoder_rates=[2, 2], decoder_kernel_sizes=[4, 4], resblock_kernel_sizes=[3],
                   resblock_dilation_sizes=[[1]], sampling_rate=160)
    n = cfg["latent_channels"]
    cfg.update(latents_mean=[0.0] * n, latents_std=[1.0] * n)
    return cfg


# MiniMaxH3Scheduler: the shift is its only setting; 12 for video, 3 for audio (the pipeline's
# docstring and the conversion script's sigma_shift_scales).
SCHEDULERS = {"scheduler": 12.0, "audio_scheduler": 3.0}

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def byte_level_alphabet():
    """The 256 printable stand-ins a byte-level BPE (GPT-2, Qwen) uses for raw bytes."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def tokenizer_vocab():
    """<|endoftext|> then the 256 byte symbols; the vision tokens are added after them. No merges:
    every byte is a token, so a prompt is about 4x as many tokens as Qwen's real BPE makes of it
    (a few hundred text rows beside the ~37,000 video rows of a 124-frame 1344x768 clip)."""
    vocab = {"<|endoftext|>": 0}
    for ch in byte_level_alphabet():
        vocab[ch] = len(vocab)
    return vocab


def token_ids():
    """The ids the tokenizer gives the vision tokens (added after the vocabulary, in order)."""
    n = len(tokenizer_vocab())
    return {t: n + i for i, t in enumerate(VISION_TOKENS)}


def plan(tiny=False):
    return {
        "bundle": BUNDLE,
        "checkpoint": CHECKPOINT,
        "tiny": tiny,
        "transformer": transformer_config(tiny),
        "text_encoder": text_encoder_config(token_ids(), tiny),
        "vae": vae_config(tiny),
        "audio_vae": audio_vae_config(tiny),
        "schedulers": dict(SCHEDULERS),
        "tokenizer_vocab_size": len(tokenizer_vocab()) + len(VISION_TOKENS),
    }


# ---------------------------------------------------------------------------------------------
# Models on the meta device (torch, transformers, diffusers imported here)


def model_classes():
    from diffusers import AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio, MiniMaxH3Transformer3DModel
    from transformers import Qwen3VLForConditionalGeneration

    return {"transformer": MiniMaxH3Transformer3DModel, "text_encoder": Qwen3VLForConditionalGeneration,
            "vae": AutoencoderKLMiniMaxH3, "audio_vae": AutoencoderKLMiniMaxH3Audio}


def meta_models(p):
    """Every model of the plan, constructed on torch's meta device: shapes without storage."""
    import torch
    from transformers import Qwen3VLConfig

    classes = model_classes()
    with torch.device("meta"):
        return {
            "transformer": classes["transformer"](**p["transformer"]),
            "text_encoder": classes["text_encoder"](Qwen3VLConfig(**p["text_encoder"])),
            "vae": classes["vae"](**p["vae"]),
            "audio_vae": classes["audio_vae"](**p["audio_vae"]),
        }


def bf16_bytes(model):
    """Bytes of a model's parameters as loaded in bf16: fp32 where the class keeps modules in fp32
    (matched as diffusers does: a name segment equal to a _keep_in_fp32_modules entry)."""
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    total = 0
    for name, prm in model.named_parameters():
        fp32 = any(k in name.split(".") for k in keep)
        total += prm.numel() * (4 if fp32 else 2)
    return total


def counts(models):
    out = {}
    for name, m in models.items():
        out[name] = {"params": sum(p.numel() for p in m.parameters()), "bf16_bytes": bf16_bytes(m)}
    te = models["text_encoder"]
    out["text_encoder"]["vision_params"] = sum(p.numel() for p in te.model.visual.parameters())
    out["text_encoder"]["lm_head_params"] = te.lm_head.weight.numel()
    return out


# ---------------------------------------------------------------------------------------------
# Writing the config-only bundle


def tokenizer_and_processor():
    from transformers import Qwen2TokenizerFast, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tokenizer = Qwen2TokenizerFast(vocab=tokenizer_vocab(), merges=[], additional_special_tokens=VISION_TOKENS)
    got = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    if got != token_ids():
        raise RuntimeError("tokenizer gave the vision tokens %s, expected %s" % (got, token_ids()))
    # Qwen3-VL's patch geometry (16 px, merge 2, 2 frames); the t2va workflow never calls the
    # image or video processor, it only asks the processor for token types.
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2),
                                 tokenizer=tokenizer,
                                 video_processor=Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2))
    return tokenizer, processor


def write_bundle(p, out_root, seed=0):
    """Writes the config-only bundle under out_root/<bundle>; returns its directory and the
    parameter counts (from the meta models)."""
    import diffusers
    from diffusers import MiniMaxH3Scheduler
    from diffusers.modular_pipelines import MiniMaxH3Blocks

    t0 = time.perf_counter()
    out = os.path.abspath(os.path.join(out_root, p["bundle"]))
    os.makedirs(out, exist_ok=True)
    for name in MODELS:
        stale = weight_files(os.path.join(out, name))
        if stale:
            raise RuntimeError("%s already holds weight files (%s); remove the old bundle first"
                               % (os.path.join(out, name), ", ".join(stale)))
    models = meta_models(p)
    for name in ("transformer", "vae", "audio_vae"):
        models[name].save_config(os.path.join(out, name))  # config.json, no weights
    models["text_encoder"].config.save_pretrained(os.path.join(out, "text_encoder"))
    tokenizer, processor = tokenizer_and_processor()
    # The light components go through the pipeline's own save, which writes their folders and a
    # modular_model_index.json pointing at them; the four models are then entered by hand, as
    # save_pretrained would enter them, with a config and no weights.
    pipe = MiniMaxH3Blocks().get_workflow("t2va").init_pipeline()
    pipe.update_components(tokenizer=tokenizer, processor=processor,
                           **{name: MiniMaxH3Scheduler(shift=shift) for name, shift in p["schedulers"].items()})
    pipe.save_pretrained(out, overwrite_modular_index=True)
    index_path = os.path.join(out, "modular_model_index.json")
    with open(index_path) as f:
        index = json.load(f)
    for name, m in models.items():
        library = "transformers" if name == "text_encoder" else "diffusers"
        cls = type(m).__name__
        index[name] = [library, cls, {"pretrained_model_name_or_path": out, "revision": None, "subfolder": name,
                                      "type_hint": [library, cls], "variant": None}]
    index["_blocks_class_name"] = "MiniMaxH3Blocks"  # as the upstream conversion writes it
    index["_diffusers_version"] = diffusers.__version__
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")
    sizes = counts(models)
    with open(os.path.join(out, l0.MARKER), "w") as f:
        f.write(marker_text(p, seed, sizes))
    return {"dir": out, "sizes": sizes, "seconds": round(time.perf_counter() - t0, 2)}


def marker_text(p, seed, sizes):
    params = {name: s["params"] for name, s in sizes.items()}
    return l0.marker_text(
        p["checkpoint"], BUILDER, p["tiny"], seed,
        "transformer and text encoder N(0, %g) drawn at load, VAEs default init" % INIT_STD, params,
        notes=(IN_MEMORY_LINE % seed,))


def describe(sizes):
    lines = []
    for name in MODELS:
        s = sizes[name]
        lines.append("  %-13s %16s params  %7.2f GiB as loaded (bf16, fp32-kept modules fp32)"
                     % (name, format(s["params"], ","), s["bf16_bytes"] / 2**30))
    total = sum(sizes[n]["bf16_bytes"] for n in MODELS)
    lines.append("  %-13s %16s params  %7.2f GiB" % ("total", format(sum(sizes[n]["params"] for n in MODELS), ","),
                                                     total / 2**30))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="bundles root (what MEDIAQUAL_BUNDLES points at)")
    ap.add_argument("--seed", type=int, default=0, help="the seed the adapter draws the weights from")
    ap.add_argument("--tiny", action="store_true", help="tiny dims (same structure and geometry), for CPU tests")
    ap.add_argument("--dry-run", action="store_true", help="print the configs and meta-device parameter counts; write nothing")
    a = ap.parse_args(argv)
    p = plan(a.tiny)
    if a.dry_run:
        sizes = counts(meta_models(p))
        json.dump(dict(p, sizes=sizes), sys.stdout, indent=1)
        sys.stdout.write("\n")
        print("would write %s (configs only):\n%s" % (os.path.join(a.out, p["bundle"]), describe(sizes)))
        return 0
    result = write_bundle(p, a.out, a.seed)
    print("wrote %s in %.1f s (configs only, no weights):\n%s" % (result["dir"], result["seconds"], describe(result["sizes"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
