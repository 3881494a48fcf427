"""A tiny random HunyuanVideo 1.5 text-to-video or image-to-video pipeline, built locally (no model
hub), for tests.

Every component is diffusers' or transformers' own class at a tiny size: a Qwen 2.5-VL text model
whose byte-level BPE vocabulary is trained here with the ``tokenizers`` package (the same
normaliser, pre-tokenizer regex and special tokens as Qwen2Tokenizer), a ByT5 encoder (bytes, no
vocabulary), the HunyuanVideo 1.5 transformer and VAE, FlowMatchEuler and the classifier-free
guider; image-to-video adds a SigLIP vision model and its image processor (the image tokens). The
two variants draw the same weights for the shared components (same seed, same order).
``write_tiny_hunyuan15`` saves either as a diffusers directory, so exporting it follows the code
path of a real checkpoint directory.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

# HunyuanVideo 1.5 480p t2v's scheduler_config.json (shift 5; the pipeline passes its own sigmas).
SCHEDULER_CONFIG = dict(num_train_timesteps=1000, shift=5.0, use_dynamic_shifting=False)

# Qwen 2.5-VL's chat template, restricted to what HunyuanVideo15Pipeline sends (string contents,
# a system and a user message, the generation prompt): it renders the same text as the real one.
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QWEN_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# What the tiny BPE learns from: the pipeline's system message, some prompts, accents, CJK, emoji.
CORPUS = [
    "You are a helpful assistant. Describe the video by detailing the following aspects:",
    "1. The main content and theme of the video. 2. The color, shape, size, texture, quantity, text, and spatial "
    "relationships of the objects. 3. Actions, events, behaviors temporal relationships, physical movement changes "
    "of the objects. 4. background environment, light, style and atmosphere. 5. camera angles, movements, and "
    "transitions used in the video.",
    "a dog barks at a passing car", "A cat walks on the grass, realistic", "a red fox runs through snow at dawn",
    "the camera pans slowly over a city at night, neon lights reflecting in the rain",
    "Une fête à Paris, café crème et crêpes; niño, señor, Zürich, Ærø", "東京の夜景、雨の中のネオン。猫が歩いている",
    "一只小狗在草地上奔跑", "서울의 밤", "🐶🚗💨 party 🎉 time", "numbers 12345 and 3.14159, it's we're they'll",
    "Text \"HELLO\" on a sign", "tabs\tand\nnewlines\r\n  spaces   everywhere",
]


def train_tiny_qwen_tokenizer(vocab_size: int = 600):
    """A Qwen2Tokenizer with a small byte-level BPE vocabulary trained on CORPUS."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    probe = Qwen2Tokenizer()  # its pipeline (NFC, the split regex, byte level), trained below
    tok = Tokenizer(models.BPE())
    tok.normalizer = probe.backend_tokenizer.normalizer
    tok.pre_tokenizer = probe.backend_tokenizer.pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=QWEN_SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    model = json_of(tok)["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tokenizer = Qwen2Tokenizer(vocab=model["vocab"], merges=merges, additional_special_tokens=QWEN_SPECIAL_TOKENS[1:])
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    tokenizer.padding_side = "right"
    return tokenizer


def json_of(tok):
    import json

    return json.loads(tok.to_str())


def tiny_text_encoder(vocab_size: int):
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    config = Qwen2_5_VLTextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                   "mrope_section": [2, 1, 1]},
                                  layer_types=["full_attention"] * 4, attention_dropout=0.0,
                                  bos_token_id=None, eos_token_id=2, pad_token_id=0)
    return Qwen2_5_VLTextModel(config).eval()


def tiny_byt5():
    from transformers import ByT5Tokenizer, T5Config, T5EncoderModel

    config = T5Config(vocab_size=384, d_model=24, d_kv=8, d_ff=48, num_layers=2, num_heads=3,
                      relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
                      feed_forward_proj="gated-gelu", is_encoder_decoder=False, use_cache=False)
    return ByT5Tokenizer(), T5EncoderModel(config).eval()


# The tiny SigLIP's input side and token width: a 32x32 video's picture reaches it unresized
# (the image processor's resize is then exact in vgen too), 16 tokens of 16 = image_embed_dim.
IMAGE_SIZE, IMAGE_DIM = 32, 16


def tiny_transformer(text_dim: int, text_2_dim: int, latent_channels: int = 4, task_type: str = "t2v"):
    from diffusers import HunyuanVideo15Transformer3DModel

    # rope axes 2+2+4 = head dim 8; in_channels = latents + condition latents + mask. The I2V
    # pipeline picks the video size from the image and target_size (buckets of 16 px with
    # target_size**2 pixels): 32 gives 32x32 for a square picture, the image encoder's size.
    return HunyuanVideo15Transformer3DModel(
        in_channels=2 * latent_channels + 1, out_channels=latent_channels, num_attention_heads=2, attention_head_dim=8,
        num_layers=2, num_refiner_layers=1, mlp_ratio=2.0, patch_size=1, patch_size_t=1, text_embed_dim=text_dim,
        text_embed_2_dim=text_2_dim, image_embed_dim=IMAGE_DIM, rope_axes_dim=(2, 2, 4),
        target_size=64 if task_type == "t2v" else IMAGE_SIZE, task_type=task_type).eval()


def tiny_image_encoder():
    """SigLIP at a tiny size and its processor (fixed-size bicubic resize, mean = std = 0.5)."""
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    config = SiglipVisionConfig(hidden_size=IMAGE_DIM, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                                image_size=IMAGE_SIZE, patch_size=8, attention_dropout=0.0)
    processor = SiglipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return processor, SiglipVisionModel(config).eval()


def tiny_vae(latent_channels: int = 4):
    from diffusers import AutoencoderKLHunyuanVideo15

    # spatial 2**4 = 16 as the real VAE, temporal 4; few channels.
    return AutoencoderKLHunyuanVideo15(latent_channels=latent_channels, block_out_channels=(8, 8, 16, 16, 16),
                                       layers_per_block=1, spatial_compression_ratio=16,
                                       temporal_compression_ratio=4, scaling_factor=1.03682).eval()


def make_scheduler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)


VARIANTS = ("t2v", "i2v")


def build_tiny_hunyuan15_pipeline(seed: int = 0, guidance_scale: float = 6.0, variant: str = "t2v"):
    """The tiny random HunyuanVideo15Pipeline, or HunyuanVideo15ImageToVideoPipeline for "i2v"
    (eval mode, float32)."""
    from diffusers import ClassifierFreeGuidance, HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline

    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {VARIANTS}")
    tokenizer = train_tiny_qwen_tokenizer()
    torch.manual_seed(seed)
    text_encoder = tiny_text_encoder(len(tokenizer))
    tokenizer_2, text_encoder_2 = tiny_byt5()
    transformer = tiny_transformer(text_encoder.config.hidden_size, text_encoder_2.config.d_model, task_type=variant)
    vae = tiny_vae()
    parts = dict(text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer, vae=vae,
                 scheduler=make_scheduler(), text_encoder_2=text_encoder_2, tokenizer_2=tokenizer_2,
                 guider=ClassifierFreeGuidance(guidance_scale=guidance_scale))
    if variant == "i2v":
        feature_extractor, image_encoder = tiny_image_encoder()
        pipe = HunyuanVideo15ImageToVideoPipeline(**parts, image_encoder=image_encoder,
                                                  feature_extractor=feature_extractor)
    else:
        pipe = HunyuanVideo15Pipeline(**parts)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def write_tiny_hunyuan15(out_dir: Path | str, seed: int = 0, variant: str = "t2v") -> Path:
    """Build the tiny pipeline (``variant`` "t2v" or "i2v") and save it as a diffusers directory."""
    out_dir = Path(out_dir)
    pipe = build_tiny_hunyuan15_pipeline(seed=seed, variant=variant)
    pipe.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


if __name__ == "__main__":  # a quick look: python -m vgen_export.tiny_hunyuan15 DIR [t2v|i2v]
    import sys

    with tempfile.TemporaryDirectory() as tmp:
        print(write_tiny_hunyuan15(sys.argv[1] if len(sys.argv) > 1 else Path(tmp) / "tiny",
                                   variant=sys.argv[2] if len(sys.argv) > 2 else "t2v"))
