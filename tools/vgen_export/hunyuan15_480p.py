"""A real-size HunyuanVideo 1.5 480p text-to-video diffusers directory with random weights, built offline.

The published 480p T2V configuration as diffusers' own conversion script writes it
(scripts/convert_hunyuan_video1_5_to_diffusers.py in huggingface/diffusers, ``480p_t2v``, converting
tencent/HunyuanVideo-1.5): HunyuanVideo15Transformer3DModel's defaults (54 double-stream blocks of
16 heads x 128 = 2048 wide, mlp ratio 4, 2 token-refiner layers, text_embed_dim 3584 = Qwen 2.5-VL
7B's hidden size, text_embed_2_dim 1472 = ByT5-small's d_model, image_embed_dim 1152, rope axes
(16, 56, 56), theta 256; 8.33 B parameters, counted here) with the script's ``target_size 640``
and ``task_type "i2v"`` (the 480p T2V checkpoint carries the image-conditioning inputs); the VAE
is AutoencoderKLHunyuanVideo15's defaults (32 latent channels, blocks (128, 256, 512, 1024,
1024), spatial 16, temporal 4, scaling 1.03682; 1.26 B parameters); FlowMatchEuler with shift
5.0 and ClassifierFreeGuidance 6.0 (the script's SCHEDULER_CONFIGS / GUIDANCE_CONFIGS).

Deliberate reductions, recorded by ``describe()``:
- the transformer has ``layers`` of its 54 blocks (every block is the same size);
- the Qwen 2.5-VL text model has Qwen2.5-VL-7B-Instruct's width (hidden 3584, intermediate
  18944, 28 heads, 4 key/value heads, rope theta 1e6, mrope sections (16, 24, 24): its
  config.json) with ``text_layers`` of its 28 layers and tiny_hunyuan15's small trained BPE
  vocabulary. The pipeline takes the hidden state 2 layers before the last
  (num_hidden_layers_to_skip), so 3 layers is the least that runs a layer whose output is used;
- ByT5 is ByT5-small's encoder at its full published size (d_model 1472, 12 layers, 6 heads of
  64, d_ff 3584, gated GELU: google/byt5-small's config.json), random weights;
- ``dtype`` (bfloat16 in bench/real_size.py, the released checkpoint's) for the transformer and
  both text encoders; the VAE stays float32.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import torch

from .tiny_hunyuan15 import SCHEDULER_CONFIG, train_tiny_qwen_tokenizer

REAL_LAYERS = 54
REAL_TEXT_LAYERS = 28
TRANSFORMER_CONFIG = dict(in_channels=65, out_channels=32, num_attention_heads=16, attention_head_dim=128,
                          num_layers=REAL_LAYERS, num_refiner_layers=2, mlp_ratio=4.0, patch_size=1, patch_size_t=1,
                          qk_norm="rms_norm", text_embed_dim=3584, text_embed_2_dim=1472, image_embed_dim=1152,
                          rope_theta=256.0, rope_axes_dim=(16, 56, 56), target_size=640, task_type="i2v")
VAE_CONFIG = dict(in_channels=3, out_channels=3, latent_channels=32, block_out_channels=(128, 256, 512, 1024, 1024),
                  layers_per_block=2, spatial_compression_ratio=16, temporal_compression_ratio=4,
                  downsample_match_channel=True, upsample_match_channel=True, scaling_factor=1.03682)
QWEN25_VL_7B_TEXT_WIDTH = dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                               num_key_value_heads=4, rms_norm_eps=1e-6, max_position_embeddings=128000,
                               hidden_act="silu")
QWEN_ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}
BYT5_SMALL = dict(vocab_size=384, d_model=1472, d_kv=64, d_ff=3584, num_layers=12, num_heads=6,
                  relative_attention_num_buckets=32, relative_attention_max_distance=128,
                  feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6)
GUIDANCE_SCALE = 6.0


def describe(layers: int, text_layers: int, dtype: torch.dtype) -> dict:
    return {"transformer": f"HunyuanVideo 1.5 480p T2V (diffusers convert_hunyuan_video1_5_to_diffusers.py "
                           f"480p_t2v), {layers} of {REAL_LAYERS} blocks, random weights, {dtype}",
            "vae": "AutoencoderKLHunyuanVideo15 defaults, float32",
            "text_encoder": f"Qwen 2.5-VL 7B width, {text_layers} of {REAL_TEXT_LAYERS} layers, tiny vocabulary, "
                            f"{dtype}",
            "text_encoder_2": f"ByT5-small encoder, full size, {dtype}",
            "scheduler": "FlowMatchEuler shift 5.0", "guider": f"ClassifierFreeGuidance {GUIDANCE_SCALE}"}


def write_hunyuan15_480p(out_dir: Path | str, layers: int = REAL_LAYERS, text_layers: int = 3, seed: int = 0,
                         dtype: torch.dtype = torch.float32) -> Path:
    """Build and save the pipeline component by component (each freed before the next); the VAE
    stays float32."""
    import diffusers
    from diffusers import (AutoencoderKLHunyuanVideo15, ClassifierFreeGuidance, FlowMatchEulerDiscreteScheduler,
                           HunyuanVideo15Transformer3DModel)
    from transformers import ByT5Tokenizer, Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel, T5Config, T5EncoderModel

    if text_layers < 3:
        raise ValueError("text_layers must be >= 3: the pipeline reads the state 2 layers before the last")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tiny_qwen_tokenizer()
    tokenizer.save_pretrained(out_dir / "tokenizer")
    ByT5Tokenizer().save_pretrained(out_dir / "tokenizer_2")
    FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG).save_pretrained(out_dir / "scheduler")
    ClassifierFreeGuidance(guidance_scale=GUIDANCE_SCALE).save_pretrained(out_dir / "guider")
    qwen = Qwen2_5_VLTextConfig(vocab_size=len(tokenizer), num_hidden_layers=text_layers, rope_parameters=QWEN_ROPE,
                                layer_types=["full_attention"] * text_layers, attention_dropout=0.0,
                                bos_token_id=None, eos_token_id=2, pad_token_id=0, **QWEN25_VL_7B_TEXT_WIDTH)
    torch.manual_seed(seed)
    builders = {
        "text_encoder": (lambda: Qwen2_5_VLTextModel(qwen), dtype, "transformers"),
        "text_encoder_2": (lambda: T5EncoderModel(T5Config(dropout_rate=0.0, is_encoder_decoder=False, use_cache=False,
                                                           **BYT5_SMALL)), dtype, "transformers"),
        "transformer": (lambda: HunyuanVideo15Transformer3DModel(**{**TRANSFORMER_CONFIG, "num_layers": layers}),
                        dtype, "diffusers"),
        "vae": (lambda: AutoencoderKLHunyuanVideo15(**VAE_CONFIG), torch.float32, "diffusers"),
    }
    # What HunyuanVideo15Pipeline.save_pretrained writes.
    index = {"_class_name": "HunyuanVideo15Pipeline", "_diffusers_version": diffusers.__version__,
             "guider": ["diffusers", "ClassifierFreeGuidance"],
             "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
             "tokenizer": ["transformers", type(tokenizer).__name__], "tokenizer_2": ["transformers", "ByT5Tokenizer"]}
    for name, (build, part_dtype, library) in builders.items():
        with torch.no_grad():
            module = build().eval().to(part_dtype)
        module.save_pretrained(out_dir / name, safe_serialization=True, max_shard_size="50GB")
        index[name] = [library, type(module).__name__]
        del module
        gc.collect()
    (out_dir / "model_index.json").write_text(json.dumps(index, indent=2))
    return out_dir
