#!/usr/bin/env python3
"""Build an L0-random Qwen-Image-Edit-2511 bundle: the real architecture, random weights.

The bundle is a Hugging Face diffusers snapshot (model_index.json, transformer/, vae/,
text_encoder/, tokenizer/, processor/, scheduler/) that QwenImageEditPlusPipeline.from_pretrained
and models/qwenimage/adapter.py load like the real checkpoint. Every configuration is written here
in code (no download): the 60-layer QwenImageTransformer2DModel (zero_cond_t, as in 2511), the
Qwen-Image VAE, a Qwen2.5-VL-7B-Instruct text encoder with its vision tower, the flow-matching
Euler scheduler with dynamic shifting, and a byte-level BPE tokenizer made in code whose special
tokens sit at the real ids. Transformer and text-encoder parameters are drawn from N(0, 0.02) with
a fixed seed, on the device, in bf16; the VAE keeps its seeded default initialisation (an
N(0, 0.02) VAE decodes every latent to flat grey) and is saved in bf16 like the real one.
An L0-RANDOM.txt marker says what the bundle is: good for mechanics, timing, memory and shapes;
never for quality.

  python3 models/qwenimage/build_l0.py --out $MEDIAQUAL_BUNDLES                 # the full-size bundle (~58 GB)
  python3 models/qwenimage/build_l0.py --out /tmp/b --tiny --device cpu         # tiny dims, any machine
  python3 models/qwenimage/build_l0.py --out /tmp/b --dry-run                   # configs and sizes, no torch

The bundle goes to <out>/<bundle name> (the inventory row's Bundle, Qwen/Qwen-Image-Edit-2511), so
--out is what MEDIAQUAL_BUNDLES points at. One component at a time is built on the device (in bf16,
no fp32 pass, no host copy), drawn, saved (5 GB safetensors shards, each copied to host memory as
it is written) and freed, so the device holds at most the transformer (~41 GB). The build refuses
to start where the disk cannot take the whole bundle. On one H200 (2026-11) the full bundle took
68 s (85 s with the imports): 57.71 GB, the transformer's 40.86 GB saved in 43 s, the text
encoder's 16.58 GB in 22 s; construction and drawing took under a second each.

torch, diffusers, transformers and tokenizers are imported only when building; the configuration
code is importable without them (models/qwenimage/test_adapter.py checks its key numbers, and with
the stack installed builds a --tiny bundle and serves edits from it through adapter.py).
"""

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import l0  # noqa: E402
from pyworker.l0 import BASE_WORDS, INIT_STD, linear_params  # noqa: E402

# The Qwen-Image VAE is Wan2.1's: its config carries the very same latent statistics.
from wan.build_l0 import WAN21_LATENTS_MEAN, WAN21_LATENTS_STD  # noqa: E402

CHECKPOINT = "Qwen/Qwen-Image-Edit-2511"
BUNDLE = "Qwen/Qwen-Image-Edit-2511"  # the inventory row's Bundle (models/qwenimage/qwenimage.go)
PIPELINE_CLASS = "QwenImageEditPlusPipeline"
SHARD_SIZE = "5GB"  # the real snapshot's transformer and text encoder come in ~5 GB shards
BF16_BYTES = 2

# ---------------------------------------------------------------------------------------------
# Configurations (pure)


def transformer_config(tiny=False):
    """QwenImageTransformer2DModel config: Qwen-Image's 20B MMDiT. 2511 sets zero_cond_t (the
    reference image's tokens are modulated with timestep 0); 2509 and the base model do not."""
    cfg = {
        "patch_size": 2,
        "in_channels": 64,
        "out_channels": 16,
        "num_layers": 60,
        "attention_head_dim": 128,
        "num_attention_heads": 24,
        "joint_attention_dim": 3584,
        "guidance_embeds": False,
        "axes_dims_rope": [16, 56, 56],
        "zero_cond_t": True,
        "use_additional_t_cond": False,
        "use_layer3d_rope": False,
    }
    if tiny:
        cfg.update(num_layers=2, num_attention_heads=2, attention_head_dim=32, axes_dims_rope=[8, 12, 12],
                   joint_attention_dim=text_encoder_config(tiny=True)["text_config"]["hidden_size"])
    return cfg


def vae_config(tiny=False):
    """AutoencoderKLQwenImage config (the Qwen-Image VAE; its latent statistics are Wan2.1's)."""
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
    }
    if tiny:
        # The pipeline encodes every reference at about 1024² whatever the output size, and a
        # bf16 conv3d on a CPU is about 5x slower than fp32: at base_dim 8 that encode took 27 s
        # a job on the 2-core development machine, at 4 about 8 s. (At 2 the decoder's
        # two-channel last stage lost the prompt's effect on the image: CompiledEngineTest failed.)
        cfg.update(base_dim=4, num_res_blocks=1)
    return cfg


# Special tokens of the Qwen2/Qwen2.5 tokenizer, in id order from 151643 (added_tokens.json of
# Qwen2.5-VL-7B-Instruct, which Qwen-Image's tokenizer/ and processor/ carry): (token, special).
SPECIAL_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
]
BASE_VOCAB_SIZE = 151643  # BPE entries below the special tokens (the real vocab.json has this many)
TOKEN_IDS = {tok: BASE_VOCAB_SIZE + i for i, (tok, _) in enumerate(SPECIAL_TOKENS)}
TOKENIZER_MAX_LENGTH = 131072

# QwenImageEditPlusPipeline's prompt template and the number of its leading tokens the pipeline
# drops (prompt_template_encode, prompt_template_encode_start_idx), and its per-image prefix.
EDIT_TEMPLATE = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a new "
    "image that meets the user's requirements while maintaining consistency with the original input where "
    "appropriate.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
EDIT_TEMPLATE_START_IDX = 64
IMAGE_PROMPT = "Picture {}: <|vision_start|><|image_pad|><|vision_end|>"
EDIT_WORDS = (
    "make turn change replace remove add put keep edit colour color purple photo picture image sky hat glasses "
    "text sign background style painting sketch cartoon portrait face hair shirt dress"
).split()


def text_encoder_config(tiny=False):
    """Qwen2_5_VLForConditionalGeneration config: Qwen2.5-VL-7B-Instruct (text_encoder/config.json
    of Qwen-Image), the vision tower at its real size and the real special-token ids."""
    text = {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "hidden_act": "silu",
        "max_position_embeddings": 128000,
        "max_window_layers": 28,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "default", "rope_type": "default", "mrope_section": [16, 24, 24]},
        "use_sliding_window": False,
        "sliding_window": 32768,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "bos_token_id": TOKEN_IDS["<|endoftext|>"],
        "eos_token_id": TOKEN_IDS["<|im_end|>"],
        "tie_word_embeddings": False,
    }
    vision = {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "hidden_act": "silu",
        "in_channels": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "tokens_per_second": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "initializer_range": 0.02,
    }
    if tiny:
        # Same structure and vocabulary (the real token ids must exist); tiny widths and depths.
        text.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, max_window_layers=2,
                    num_attention_heads=4, num_key_value_heads=2,
                    rope_scaling={"type": "default", "rope_type": "default", "mrope_section": [2, 3, 3]})
        vision.update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      fullatt_block_indexes=[1])
    return {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "image_token_id": TOKEN_IDS["<|image_pad|>"],
        "video_token_id": TOKEN_IDS["<|video_pad|>"],
        "vision_start_token_id": TOKEN_IDS["<|vision_start|>"],
        "vision_end_token_id": TOKEN_IDS["<|vision_end|>"],
        "tie_word_embeddings": False,
        "text_config": text,
        "vision_config": vision,
    }


def image_processor_config():
    """Qwen2VLImageProcessor settings of Qwen2.5-VL-7B-Instruct (preprocessor_config.json)."""
    return {
        "min_pixels": 3136,
        "max_pixels": 12845056,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
    }


def scheduler_config():
    """FlowMatchEulerDiscreteScheduler as in Qwen-Image's scheduler_config.json: exponential
    dynamic shifting between 0.5 (256 tokens) and 0.9 (8192 tokens), terminal sigma 0.02."""
    return {
        "num_train_timesteps": 1000,
        "shift": 1.0,
        "use_dynamic_shifting": True,
        "base_shift": 0.5,
        "max_shift": 0.9,
        "base_image_seq_len": 256,
        "max_image_seq_len": 8192,
        "invert_sigmas": False,
        "shift_terminal": 0.02,
        "use_karras_sigmas": False,
        "use_exponential_sigmas": False,
        "use_beta_sigmas": False,
        "time_shift_type": "exponential",
        "stochastic_sampling": False,
    }


def model_index(diffusers_version):
    """model_index.json of the snapshot (the components QwenImageEditPlusPipeline.__init__ takes)."""
    return {
        "_class_name": PIPELINE_CLASS,
        "_diffusers_version": diffusers_version,
        "processor": ["transformers", "Qwen2VLProcessor"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "QwenImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage"],
    }


def tokenizer_corpus():
    """Text the byte-level BPE is trained on: the pipeline's templates (so that, as with the real
    tokenizer, the dropped system prefix is EDIT_TEMPLATE_START_IDX tokens) and a word list."""
    template = EDIT_TEMPLATE.format(IMAGE_PROMPT.format(1))
    for tok in TOKEN_IDS:
        template = template.replace(tok, "\n")
    words = list(BASE_WORDS) + EDIT_WORDS + [w.capitalize() for w in EDIT_WORDS]
    return [template] + [" ".join(words), "\n".join(words)]


# ---------------------------------------------------------------------------------------------
# Parameter counts (pure; the tiny test checks them against the instantiated modules)


def estimate_transformer_params(cfg):
    """Parameters of QwenImageTransformer2DModel (no guidance embedding, no extra t condition)."""
    d = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    hd = cfg["attention_head_dim"]
    attn = 8 * linear_params(d, d) + 4 * hd  # q/k/v, added q/k/v, to_out, to_add_out; 4 RMS qk norms
    mlp = linear_params(d, 4 * d) + linear_params(4 * d, d)  # gelu-approximate FeedForward
    block = 2 * linear_params(d, 6 * d) + attn + 2 * mlp  # img_mod, txt_mod; img_mlp, txt_mlp
    p2 = cfg["patch_size"] ** 2
    top = linear_params(256, d) + linear_params(d, d)  # timestep embedder
    top += cfg["joint_attention_dim"]  # txt_norm (RMSNorm weight)
    top += linear_params(cfg["in_channels"], d) + linear_params(cfg["joint_attention_dim"], d)  # img_in, txt_in
    top += linear_params(d, 2 * d)  # norm_out (AdaLayerNormContinuous)
    top += linear_params(d, p2 * cfg["out_channels"])  # proj_out
    return cfg["num_layers"] * block + top


def estimate_text_encoder_params(cfg):
    """Parameters of Qwen2_5_VLForConditionalGeneration: language model, untied lm_head, vision."""
    t, v = cfg["text_config"], cfg["vision_config"]
    h, hd = t["hidden_size"], t["hidden_size"] // t["num_attention_heads"]
    q, kv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    layer = linear_params(h, q) + 2 * linear_params(h, kv) + linear_params(q, h, bias=False)
    layer += 3 * linear_params(h, t["intermediate_size"], bias=False) + 2 * h  # SwiGLU; 2 RMS norms
    text = t["vocab_size"] * h + t["num_hidden_layers"] * layer + h + t["vocab_size"] * h  # + norm + lm_head
    vh, vi = v["hidden_size"], v["intermediate_size"]
    vblock = 2 * vh + linear_params(vh, 3 * vh) + linear_params(vh, vh)  # norms, qkv, proj
    vblock += 2 * linear_params(vh, vi) + linear_params(vi, vh)  # gate, up, down
    merged = vh * v["spatial_merge_size"] ** 2
    vision = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 * vh  # patch embed (no bias)
    vision += v["depth"] * vblock + vh + linear_params(merged, merged) + linear_params(merged, v["out_hidden_size"])
    return text + vision


def estimate_vae_params(cfg):
    """Parameters of AutoencoderKLQwenImage (causal 3D convs, RMS norms, one mid attention)."""
    def conv(i, o, taps):
        return i * o * taps + o

    def res(i, o):
        return i + conv(i, o, 27) + o + conv(o, o, 27) + (conv(i, o, 1) if i != o else 0)

    def mid(d):
        return 2 * res(d, d) + d + conv(d, 3 * d, 1) + conv(d, d, 1)

    def resample(d, mode):
        return {
            "downsample2d": conv(d, d, 9),
            "downsample3d": conv(d, d, 9) + conv(d, d, 3),
            "upsample2d": conv(d, d // 2, 9),
            "upsample3d": conv(d, d // 2, 9) + conv(d, 2 * d, 3),
        }[mode]

    base, z, mult, nrb, tdown = cfg["base_dim"], cfg["z_dim"], cfg["dim_mult"], cfg["num_res_blocks"], cfg["temperal_downsample"]
    dims = [base * m for m in [1] + mult]
    enc = conv(3, dims[0], 27)
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        for _ in range(nrb):
            enc += res(a, b)
            a = b
        if i != len(mult) - 1:
            enc += resample(b, "downsample3d" if tdown[i] else "downsample2d")
    enc += mid(dims[-1]) + dims[-1] + conv(dims[-1], 2 * z, 27)
    tup = tdown[::-1]
    dims = [base * m for m in [mult[-1]] + mult[::-1]]
    dec = conv(z, dims[0], 27) + mid(dims[0])
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        a = a // 2 if i > 0 else a
        dec += res(a, b) + nrb * res(b, b)
        if i != len(mult) - 1:
            dec += resample(b, "upsample3d" if tup[i] else "upsample2d")
    dec += dims[-1] + conv(dims[-1], 3, 27)
    return enc + dec + conv(2 * z, 2 * z, 1) + conv(z, z, 1)


# tokenizer.json twice (tokenizer/ and processor/: 151,665 vocabulary entries and the merges) and
# the small configs, as measured on a built bundle.
TOKENIZER_FILES_BYTES = 11_200_000


def plan(tiny=False):
    te, tr, vae = text_encoder_config(tiny), transformer_config(tiny), vae_config(tiny)
    params = {
        "transformer": estimate_transformer_params(tr),
        "text_encoder": estimate_text_encoder_params(te),
        "vae": estimate_vae_params(vae),
    }
    est_bytes = {k: n * BF16_BYTES for k, n in params.items()}
    est_bytes["tokenizer+processor"] = TOKENIZER_FILES_BYTES
    return {
        "tiny": tiny,
        "bundle": BUNDLE,
        "checkpoint": CHECKPOINT,
        "transformer": tr,
        "vae": vae,
        "text_encoder": te,
        "image_processor": image_processor_config(),
        "tokenizer": {"base_vocab_size": BASE_VOCAB_SIZE, "special_token_ids": TOKEN_IDS,
                      "model_max_length": TOKENIZER_MAX_LENGTH},
        "scheduler": scheduler_config(),
        "estimated_params": params,
        "estimated_bytes": est_bytes,
        "estimated_total_bytes": sum(est_bytes.values()),
    }


def marker_text(p, seed, sizes, notes=()):
    return l0.marker_text(p["checkpoint"], "models/qwenimage/build_l0.py", p["tiny"], seed,
                          "transformer and text encoder N(0, %g), VAE default init" % INIT_STD, sizes,
                          notes=["The tokenizer is a small byte-level BPE made in code, with the real special-token ids.", *notes])


# ---------------------------------------------------------------------------------------------
# Building (torch, transformers, diffusers, tokenizers imported here)


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: each byte 0..255 -> a printable character (what the
    tokenizers ByteLevel pre-tokenizer maps bytes to), in the usual order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def make_tokenizer():
    """A Qwen2Tokenizer (the real class, pre-tokenizer and normaliser) over a byte-level BPE
    trained in code on tokenizer_corpus(), padded to BASE_VOCAB_SIZE entries, with the 22 special
    tokens at their real ids."""
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    alphabet = bytes_to_unicode()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=BASE_VOCAB_SIZE, min_frequency=1, show_progress=False,
                                  initial_alphabet=alphabet, special_tokens=[])
    bpe.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    trained = json.loads(bpe.to_str())["model"]
    vocab = {c: i for i, c in enumerate(alphabet)}
    for tok, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(tok, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    filler = 0
    while len(vocab) < BASE_VOCAB_SIZE:  # unreachable entries, so the special tokens land at the real ids
        vocab["<|l0_unused_%d|>" % filler] = len(vocab)
        filler += 1
    for tok, i in TOKEN_IDS.items():  # in the vocab too, so that no add order can move them
        vocab[tok] = i
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=merges, unk_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        extra_special_tokens=[t for t, special in SPECIAL_TOKENS if special and t not in ("<|endoftext|>", "<|im_end|>")],
        model_max_length=TOKENIZER_MAX_LENGTH, errors="replace", clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in SPECIAL_TOKENS])
    got = {t: tokenizer.convert_tokens_to_ids(t) for t in TOKEN_IDS}
    if got != TOKEN_IDS or len(tokenizer) != BASE_VOCAB_SIZE + len(SPECIAL_TOKENS):
        raise RuntimeError("special tokens not at the real ids: %s (len %d)" % (got, len(tokenizer)))
    return tokenizer


def make_processor(tokenizer):
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    ip = image_processor_config()
    image_processor = Qwen2VLImageProcessor(**ip)
    video_processor = Qwen2VLVideoProcessor(patch_size=ip["patch_size"], temporal_patch_size=ip["temporal_patch_size"],
                                            merge_size=ip["merge_size"], image_mean=ip["image_mean"], image_std=ip["image_std"])
    return Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor)


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def build(p, out_root, seed=0, device="cuda"):
    import gc

    import diffusers
    import torch
    import transformers
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    out_dir = os.path.join(out_root, p["bundle"])
    os.makedirs(out_dir, exist_ok=True)
    # Refuse up front rather than fill the disk half way (the GPU host has 64 GB for ~58 GB).
    # Files of an earlier build are overwritten in place, so they count as free.
    need, free = p["estimated_total_bytes"], shutil.disk_usage(out_dir).free + dir_bytes(out_dir)
    if free < need * 1.01:
        raise SystemExit("not enough disk at %s: the bundle needs ~%.2f GB, %.2f GB are free" % (out_dir, need / 1e9, free / 1e9))
    report = {"dir": out_dir, "params": {}, "bytes": {}, "seconds": {}}

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def construct(make, dtype):
        """Build the module on the device with dtype as the default: no host copy, no fp32 pass."""
        old = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with dev:
                return make()
        finally:
            torch.set_default_dtype(old)

    def randomize(module):
        """Overwrite every parameter with N(0, INIT_STD) from the seeded generator, in
        registration order (deterministic for a given seed and device)."""
        with torch.no_grad():
            for _, prm in module.named_parameters():
                prm.normal_(0.0, INIT_STD, generator=gen)

    notes = []

    def component(name, make, draw, save, after=None):
        t0 = time.perf_counter()
        module = construct(make, torch.bfloat16)
        if draw:
            randomize(module)
        if after:
            notes.append(after(module))
            print("  " + notes[-1], flush=True)
        module.eval()
        sync()
        t1 = time.perf_counter()
        sub = os.path.join(out_dir, name)
        save(module, sub)
        t2 = time.perf_counter()
        n = sum(prm.numel() for prm in module.parameters())
        dtypes = sorted({str(prm.dtype).replace("torch.", "") for prm in module.parameters()})
        del module
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        report["params"][name] = n
        report["bytes"][name] = dir_bytes(sub)
        report["seconds"][name] = {"build": round(t1 - t0, 2), "save": round(t2 - t1, 2)}
        print("  %-12s %14s params (%s, %s), %6.2f GB written, built %.1f s, saved %.1f s" % (
            name, format(n, ","), "/".join(dtypes), "N(0, %g)" % INIT_STD if draw else "default init",
            report["bytes"][name] / 1e9, t1 - t0, t2 - t1), flush=True)

    def save_sharded(module, path):
        module.save_pretrained(path, safe_serialization=True, max_shard_size=SHARD_SIZE)

    print("building %s%s on %s (seed %d) into %s" % (p["checkpoint"], " (tiny)" if p["tiny"] else "", dev, seed, out_dir), flush=True)
    t_all = time.perf_counter()
    # Largest first, one at a time: the device holds at most the transformer.
    def sharpen(t):
        """Every block's joint attention sharp (the image stream's q/k norms and the text
        stream's), its residual gates open (the biases of img_mod and txt_mod) and the text
        stream's values strengthened (add_v_proj): what a fault changes has to reach the
        prediction (l0.py)."""
        blocks = t.transformer_blocks
        return " ".join([
            l0.sharpen_attention([b.attn for b in blocks], ("norm_q", "norm_k", "norm_added_q", "norm_added_k"),
                                 "every block's joint attention"),
            l0.open_gates([m[1].bias for b in blocks for m in (b.img_mod, b.txt_mod)], blocks[0].dim,
                          "the biases of each block's img_mod and txt_mod"),
            l0.strengthen_text([b.attn.add_v_proj for b in blocks], "every block's text stream (add_v_proj)")])

    component("transformer", lambda: QwenImageTransformer2DModel(**p["transformer"]), True, save_sharded, sharpen)

    def make_text_encoder():
        cfg = Qwen2_5_VLConfig(**p["text_encoder"])
        cfg.dtype = torch.bfloat16
        return Qwen2_5_VLForConditionalGeneration(cfg)

    component("text_encoder", make_text_encoder, True, save_sharded,
              lambda m: l0.unit_norm(m.model.language_model.norm, "text encoder's final norm"))

    def make_vae():
        # The VAE keeps PyTorch's default initialisation (seeded), drawn in bf16 on the device.
        # Drawn from N(0, 0.02) like the rest, this architecture (Wan2.1's VAE; see the Wan
        # builder) decodes any latent to flat grey; with its default init it decodes the (still
        # random) latents to textured images. Either way the weights are random: no quality is
        # claimed.
        torch.manual_seed(seed)
        return AutoencoderKLQwenImage(**p["vae"])

    component("vae", make_vae, False, save_sharded)

    t0 = time.perf_counter()
    tokenizer = make_tokenizer()
    tokenizer.save_pretrained(os.path.join(out_dir, "tokenizer"))
    make_processor(tokenizer).save_pretrained(os.path.join(out_dir, "processor"))
    FlowMatchEulerDiscreteScheduler(**p["scheduler"]).save_pretrained(os.path.join(out_dir, "scheduler"))
    with open(os.path.join(out_dir, "model_index.json"), "w") as f:
        json.dump(model_index(diffusers.__version__), f, indent=2, sort_keys=True)
        f.write("\n")
    for name in ("tokenizer", "processor", "scheduler"):
        report["bytes"][name] = dir_bytes(os.path.join(out_dir, name))
    report["seconds"]["tokenizer+processor+scheduler"] = round(time.perf_counter() - t0, 2)
    print("  tokenizer, processor, scheduler, model_index.json: %.2f MB, %.1f s" % (
        sum(report["bytes"][k] for k in ("tokenizer", "processor", "scheduler")) / 1e6,
        report["seconds"]["tokenizer+processor+scheduler"]), flush=True)

    with open(os.path.join(out_dir, l0.MARKER), "w") as f:
        f.write(marker_text(p, seed, report["params"], notes))
    report["disk_bytes"] = dir_bytes(out_dir)
    report["seconds"]["total"] = round(time.perf_counter() - t_all, 2)
    print("saved %s: %.2f GB on disk, total %.1f s" % (out_dir, report["disk_bytes"] / 1e9, report["seconds"]["total"]), flush=True)
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="bundles root (what MEDIAQUAL_BUNDLES points at)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny dims (same structure), for any machine")
    ap.add_argument("--dry-run", action="store_true", help="print the configs and size estimates; import no torch")
    a = ap.parse_args(argv)
    p = plan(a.tiny)
    if a.dry_run:
        json.dump(p, sys.stdout, indent=1)
        sys.stdout.write("\n")
        print("would write %s:" % os.path.join(a.out, p["bundle"]))
        for name, n in p["estimated_params"].items():
            print("  %-20s ~%7.3f B params  ~%6.2f GB (bf16)" % (name, n / 1e9, p["estimated_bytes"][name] / 1e9))
        print("  %-20s                  ~%6.2f GB" % ("tokenizer+processor", p["estimated_bytes"]["tokenizer+processor"] / 1e9))
        print("  %-20s                  ~%6.2f GB (%s bytes)" % ("total", p["estimated_total_bytes"] / 1e9,
                                                                format(p["estimated_total_bytes"], ",")))
        return 0
    result = build(p, a.out, a.seed, a.device)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
