#!/usr/bin/env python3
"""Build an L0-random Wan bundle: the real architecture, random weights.

The bundle is a Hugging Face diffusers snapshot (model_index.json, transformer/, vae/,
text_encoder/, tokenizer/, scheduler/) that WanPipeline.from_pretrained and
models/wan/adapter.py load like the real checkpoint. Every configuration is written here in code
(no download): UMT5-XXL encoder, WanTransformer3DModel, AutoencoderKLWan, flow-matching UniPC, and
a word-level tokenizer made in code. Every text-encoder and transformer parameter is drawn from N(0, 0.02) (the VAE keeps its seeded default init) with a fixed seed,
directly on the device, in the pinned precision (bf16 transformer and text encoder, fp32 VAE),
and saved with save_pretrained (safetensors). An L0-RANDOM.txt marker says what the bundle is:
good for mechanics, timing, memory and shapes; never for quality.

  python3 models/wan/build_l0.py --out $MEDIAQUAL_BUNDLES                  # Wan2.1-T2V-1.3B
  python3 models/wan/build_l0.py --out $MEDIAQUAL_BUNDLES --variant wan2.2-ti2v-5b
  python3 models/wan/build_l0.py --out /tmp/b --tiny --device cpu          # tiny dims, any machine
  python3 models/wan/build_l0.py --out /tmp/b --dry-run                    # configs only, no torch

The bundle goes to <out>/<bundle name> (the inventory row's Bundle, e.g.
Wan-AI/Wan2.1-T2V-1.3B-Diffusers), so --out is what MEDIAQUAL_BUNDLES points at. torch, diffusers
and transformers are imported only when building; the configuration code is importable without
them (models/wan/test_adapter.py checks its key numbers).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import l0  # noqa: E402
from pyworker.l0 import BASE_WORDS, INIT_STD, linear_params  # noqa: E402,F401

# ---------------------------------------------------------------------------------------------
# Configurations (pure)

WAN21_LATENTS_MEAN = [
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
]
WAN21_LATENTS_STD = [
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
]
# Wan2.2 VAE (z_dim 48), from Wan-AI/Wan2.2-TI2V-5B-Diffusers vae/config.json.
WAN22_LATENTS_MEAN = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
]
WAN22_LATENTS_STD = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
]


def umt5_config(tiny=False):
    """UMT5EncoderModel config: umt5-xxl sizes (the Wan text encoder)."""
    cfg = {
        "vocab_size": 256384,
        "d_model": 4096,
        "d_kv": 64,
        "d_ff": 10240,
        "num_layers": 24,
        "num_decoder_layers": 24,
        "num_heads": 64,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "dropout_rate": 0.1,
        "layer_norm_epsilon": 1e-6,
        "feed_forward_proj": "gated-gelu",
        "is_encoder_decoder": True,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
    }
    if tiny:
        cfg.update(vocab_size=1024, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4)
    return cfg


def transformer_config(variant, tiny=False):
    """WanTransformer3DModel config."""
    base = {
        "patch_size": [1, 2, 2],
        "attention_head_dim": 128,
        "text_dim": 4096,
        "freq_dim": 256,
        "cross_attn_norm": True,
        "qk_norm": "rms_norm_across_heads",
        "eps": 1e-6,
        "image_dim": None,
        "added_kv_proj_dim": None,
        "rope_max_seq_len": 1024,
        "pos_embed_seq_len": None,
    }
    if variant == "wan2.1-t2v-1.3b":
        base.update(num_layers=30, num_attention_heads=12, ffn_dim=8960, in_channels=16, out_channels=16)
    elif variant == "wan2.2-ti2v-5b":
        base.update(num_layers=30, num_attention_heads=24, ffn_dim=14336, in_channels=48, out_channels=48)
    else:
        raise ValueError("unknown variant %r" % variant)
    if tiny:
        base.update(num_layers=2, num_attention_heads=2, attention_head_dim=32, ffn_dim=128,
                    text_dim=umt5_config(tiny=True)["d_model"], freq_dim=32)
    return base


def vae_config(variant, tiny=False):
    """AutoencoderKLWan config: the Wan2.1 VAE (diffusers defaults) or the Wan2.2 (z_dim 48) VAE."""
    if variant == "wan2.1-t2v-1.3b":
        cfg = {
            "base_dim": 96,
            "z_dim": 16,
            "dim_mult": [1, 2, 4, 4],
            "num_res_blocks": 2,
            "attn_scales": [],
            "temperal_downsample": [False, True, True],
            "dropout": 0.0,
            "latents_mean": list(WAN21_LATENTS_MEAN),
            "latents_std": list(WAN21_LATENTS_STD),
            "is_residual": False,
            "in_channels": 3,
            "out_channels": 3,
            "patch_size": None,
            "scale_factor_temporal": 4,
            "scale_factor_spatial": 8,
        }
    elif variant == "wan2.2-ti2v-5b":
        cfg = {
            "base_dim": 160,
            "decoder_base_dim": 256,
            "z_dim": 48,
            "dim_mult": [1, 2, 4, 4],
            "num_res_blocks": 2,
            "attn_scales": [],
            "temperal_downsample": [False, True, True],
            "dropout": 0.0,
            "latents_mean": list(WAN22_LATENTS_MEAN),
            "latents_std": list(WAN22_LATENTS_STD),
            "is_residual": True,
            "in_channels": 12,
            "out_channels": 12,
            "patch_size": 2,
            "scale_factor_temporal": 4,
            "scale_factor_spatial": 16,
        }
    else:
        raise ValueError("unknown variant %r" % variant)
    if tiny:
        cfg.update(base_dim=16, num_res_blocks=1)
        if "decoder_base_dim" in cfg:
            cfg["decoder_base_dim"] = 32
    return cfg


def scheduler_config(flow_shift):
    """UniPCMultistepScheduler config as in the Wan diffusers snapshots (flow matching)."""
    return {
        "num_train_timesteps": 1000,
        "beta_start": 0.0001,
        "beta_end": 0.02,
        "beta_schedule": "linear",
        "solver_order": 2,
        "prediction_type": "flow_prediction",
        "thresholding": False,
        "predict_x0": True,
        "solver_type": "bh2",
        "lower_order_final": True,
        "disable_corrector": [],
        "use_flow_sigmas": True,
        "flow_shift": float(flow_shift),
        "timestep_spacing": "linspace",
        "steps_offset": 0,
        "final_sigmas_type": "zero",
    }


VARIANTS = {
    "wan2.1-t2v-1.3b": {
        "bundle": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
        "checkpoint": "Wan-AI/Wan2.1-T2V-1.3B",
        "flow_shift": 3.0,
        "expand_timesteps": False,
    },
    "wan2.2-ti2v-5b": {
        "bundle": "Wan-AI/Wan2.2-TI2V-5B-Diffusers",
        "checkpoint": "Wan-AI/Wan2.2-TI2V-5B",
        "flow_shift": 5.0,
        "expand_timesteps": True,  # TI2V: per-token timesteps (model_index.json of the snapshot)
    },
}

SPECIAL_TOKENS = ["<pad>", "</s>", "<unk>"]  # ids 0, 1, 2 as in T5/UMT5


def tokenizer_vocab():
    """Word-level vocabulary: special tokens first, then a fixed word list, then a-z and 0-9."""
    vocab = list(SPECIAL_TOKENS)
    seen = set(vocab)
    extra = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    for w in BASE_WORDS + extra:
        if w not in seen:
            seen.add(w)
            vocab.append(w)
    return vocab


def estimate_umt5_params(cfg):
    """Parameters of UMT5EncoderModel (shared embedding counted once)."""
    d, inner = cfg["d_model"], cfg["num_heads"] * cfg["d_kv"]
    attn = 4 * d * inner + cfg["relative_attention_num_buckets"] * cfg["num_heads"]  # q,k,v,o + per-layer bias
    ff = (3 if cfg["feed_forward_proj"].startswith("gated") else 2) * d * cfg["d_ff"]
    layer = attn + ff + 2 * d  # two RMS layer norms
    return cfg["vocab_size"] * d + cfg["num_layers"] * layer + d  # + final layer norm


def estimate_transformer_params(cfg):
    """Parameters of WanTransformer3DModel (text-to-video: no image embedder, no added k/v)."""
    d = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    patch = cfg["patch_size"][0] * cfg["patch_size"][1] * cfg["patch_size"][2]
    attn = 4 * linear_params(d, d) + 2 * d  # to_q/k/v/out + norm_q/norm_k
    block = 2 * attn + linear_params(d, cfg["ffn_dim"]) + linear_params(cfg["ffn_dim"], d) + 6 * d
    if cfg["cross_attn_norm"]:
        block += 2 * d  # norm2 weight + bias
    top = cfg["in_channels"] * d * patch + d  # patch embedding
    top += linear_params(cfg["freq_dim"], d) + linear_params(d, d)  # time embedder
    top += linear_params(d, 6 * d)  # time projection
    top += linear_params(cfg["text_dim"], d) + linear_params(d, d)  # text embedder
    top += linear_params(d, cfg["out_channels"] * patch) + 2 * d  # proj_out + scale_shift_table
    return cfg["num_layers"] * block + top


def plan(variant, tiny=False):
    v = VARIANTS[variant]
    return {
        "variant": variant,
        "tiny": tiny,
        "bundle": v["bundle"],
        "checkpoint": v["checkpoint"],
        "text_encoder": umt5_config(tiny),
        "transformer": transformer_config(variant, tiny),
        "vae": vae_config(variant, tiny),
        "scheduler": scheduler_config(v["flow_shift"]),
        "expand_timesteps": v["expand_timesteps"],
        "tokenizer_vocab_size": len(tokenizer_vocab()),
        "estimated_params": {
            "text_encoder": estimate_umt5_params(umt5_config(tiny)),
            "transformer": estimate_transformer_params(transformer_config(variant, tiny)),
        },
    }


def marker_text(p, seed, sizes, notes=()):
    return l0.marker_text(p["checkpoint"], "models/wan/build_l0.py", p["tiny"], seed,
                          "text encoder and transformer N(0, %g), VAE default init" % INIT_STD, sizes, notes)


# ---------------------------------------------------------------------------------------------
# Building (torch, transformers, diffusers imported here)


def build(p, out_root, seed=0, device="cuda"):
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    timings, sizes = {}, {}

    def randomize(name, module, dtype):
        """Cast to dtype, then overwrite every parameter with N(0, INIT_STD) from the seeded
        generator, in registration order (deterministic for a given seed and device)."""
        t0 = time.perf_counter()
        module.to(dtype=dtype)
        n = 0
        with torch.no_grad():
            for _, prm in module.named_parameters():
                prm.normal_(0.0, INIT_STD, generator=gen)
                n += prm.numel()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        sizes[name] = n
        timings[name + "_init_s"] = round(time.perf_counter() - t0, 2)
        print("  %-13s %10.2f M params, %s, initialised in %.1f s" % (name, n / 1e6, dtype, timings[name + "_init_s"]), flush=True)
        module.eval()
        return module

    print("building %s%s on %s (seed %d)" % (p["variant"], " (tiny)" if p["tiny"] else "", dev, seed), flush=True)
    t_all = time.perf_counter()
    # Modules are constructed on the device (PyTorch's default init runs there, fast), so no
    # multi-GB CPU initialisation; buffers (e.g. RoPE tables) are computed as usual.
    with dev:
        text_encoder = UMT5EncoderModel(UMT5Config(**p["text_encoder"]))
    text_encoder = randomize("text_encoder", text_encoder, torch.bfloat16)
    drawn = [l0.unit_norm(text_encoder.encoder.final_layer_norm, "text encoder's final norm")]
    with dev:
        transformer = WanTransformer3DModel(**p["transformer"])
    transformer = randomize("transformer", transformer, torch.bfloat16)
    # Self-attention only (attn1): cross-attention to the prompt keeps its draw.
    # Every block's attention, self and cross, and its residual gates: what a fault changes has to
    # reach the prediction (l0.py).
    drawn.append(l0.sharpen_attention([a for b in transformer.blocks for a in (b.attn1, b.attn2)], ("norm_q", "norm_k"),
                                      "every block's self- and cross-attention"))
    drawn.append(l0.open_gates([b.scale_shift_table.view(1, -1) for b in transformer.blocks],
                               p["transformer"]["num_attention_heads"] * p["transformer"]["attention_head_dim"],
                               "each block's scale_shift_table"))
    for note in drawn:
        print("  " + note, flush=True)
    # The VAE keeps diffusers' own (seeded) default initialisation. Drawn from N(0, 0.02) like
    # the rest, it decodes any latent to flat grey (per-frame std 0.1-0.5 levels, seen on the
    # H200): the family's blank-frame check rightly fails that, and nothing downstream is
    # exercised. With its default init it decodes the (still random) latents to textured,
    # changing frames. Either way the weights are random: no quality is claimed.
    torch.manual_seed(seed)
    with dev:
        vae = AutoencoderKLWan(**p["vae"])
    vae = vae.to(dtype=torch.float32).eval()
    sizes["vae"] = sum(prm.numel() for prm in vae.parameters())

    vocab = {w: i for i, w in enumerate(tokenizer_vocab())}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                      special_tokens=[("</s>", vocab["</s>"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tk, model_max_length=512, pad_token="<pad>",
                                        eos_token="</s>", unk_token="<unk>", padding_side="right")

    scheduler = UniPCMultistepScheduler(**p["scheduler"])
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                       transformer=transformer, transformer_2=None, boundary_ratio=None,
                       expand_timesteps=p["expand_timesteps"])

    out_dir = os.path.join(out_root, p["bundle"])
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    pipe.to("cpu")  # safetensors writes from host memory
    pipe.save_pretrained(out_dir, safe_serialization=True)
    timings["save_s"] = round(time.perf_counter() - t0, 2)
    with open(os.path.join(out_dir, l0.MARKER), "w") as f:
        f.write(marker_text(p, seed, sizes, drawn))
    timings["total_s"] = round(time.perf_counter() - t_all, 2)
    disk = 0
    for root, _, files in os.walk(out_dir):
        for name in files:
            disk += os.path.getsize(os.path.join(root, name))
    print("saved %s: %.2f GB on disk, save %.1f s, total %.1f s" % (out_dir, disk / 1e9, timings["save_s"], timings["total_s"]), flush=True)
    return {"dir": out_dir, "params": sizes, "timings": timings, "disk_bytes": disk}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="bundles root (what MEDIAQUAL_BUNDLES points at)")
    ap.add_argument("--variant", default="wan2.1-t2v-1.3b", choices=sorted(VARIANTS))
    ap.add_argument("--wan22", action="store_true", help="shorthand for --variant wan2.2-ti2v-5b")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny dims (same structure), for any machine")
    ap.add_argument("--dry-run", action="store_true", help="print the configs and estimates; import no torch")
    a = ap.parse_args(argv)
    variant = "wan2.2-ti2v-5b" if a.wan22 else a.variant
    p = plan(variant, a.tiny)
    if a.dry_run:
        json.dump(p, sys.stdout, indent=1)
        sys.stdout.write("\n")
        est = p["estimated_params"]
        print("would write %s (text encoder ~%.3f B, transformer ~%.3f B)" % (
            os.path.join(a.out, p["bundle"]), est["text_encoder"] / 1e9, est["transformer"] / 1e9))
        return 0
    result = build(p, a.out, a.seed, a.device)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
