"""A real-size LTX-2 (19B, text-to-video with audio) diffusers directory with random weights, built offline.

The published LTX-2.0 configuration as diffusers' own conversion script writes it
(scripts/convert_ltx2_to_diffusers.py in huggingface/diffusers, version "2.0", converting
Lightricks/LTX-2's ltx-2-19b-dev.safetensors):

- transformer: LTX2VideoTransformer3DModel, 48 blocks, video 32 heads x 128 (4096 wide, 128 latent
  channels, cross-attention 4096), audio 32 heads x 64 (2048 wide, 128 channels, cross-attention
  2048), caption_channels 3840, rope "split" in double precision, timestep multipliers 1000;
  18.88 B parameters at 48 blocks (counted here);
- connectors: LTX2TextConnectors, 2 + 2 layers of 30 heads x 128, 128 learnable registers, rope
  base length 4096, rope "split";
- video VAE: AutoencoderKLLTX2Video, blocks (256, 512, 1024, 2048), layers (4, 6, 6, 2, 2), decoder
  (256, 512, 1024) x 5 layers, patch 4, spatial 32, temporal 8, causal encoder, non-causal decoder,
  no timestep conditioning (1.22 B parameters);
- audio VAE: AutoencoderKLLTX2Audio, 128 base channels, ch_mult (1, 2, 4), 2 res blocks, 8 latent
  channels, 64 mel bins, 16 kHz, hop 160 (diffusers' defaults = the script's "2.0" config);
- vocoder: LTX2Vocoder, 1024 hidden, upsampling 6 x 5 x 2 x 2 x 2 = 240, 24 kHz output;
- scheduler: FlowMatchEuler as LTX-2's scheduler_config.json (tiny_ltx2.LTX2_SCHEDULER_CONFIG).

Deliberate reductions, recorded by ``describe()``:
- the transformer has ``layers`` of its 48 blocks (every block is the same size: the per-block
  cost scales to the full depth);
- the text encoder is Gemma 3 at 12B's width (hidden 3840, diffusers' LTX2TextConnectors
  docstring "default Gemma-3-12B text encoder hidden_size"; intermediate 15360, 16 heads and 8
  key/value heads of 256: google/gemma-3-12b-it's config.json) with ``text_layers`` of its 48
  layers, the tiny Gemma-layout SentencePiece vocabulary and a tiny vision tower the pipeline
  never calls; so the connectors' text_proj_in takes text_layers + 1 stacked hidden states
  instead of 49 (its only size change);
- ``dtype`` (bfloat16 by default, the conversion script's default for the transformer, text
  encoder and connectors) for those three; the VAEs and the vocoder stay float32.

Components are built, saved and freed one at a time (the whole pipeline is never in memory), so
building needs about the largest component's size.
"""

from __future__ import annotations

import gc
import json
import shutil
import tempfile
from pathlib import Path

import torch

from .tiny_ltx2 import LTX2_SCHEDULER_CONFIG, SPM_FILE_NAME, gemma_tokenizer_from_spm, train_gemma_spm

REAL_LAYERS = 48
REAL_TEXT_LAYERS = 48
REAL_MAX_LENGTH = 1024
TRANSFORMER_CONFIG = dict(
    in_channels=128, out_channels=128, patch_size=1, patch_size_t=1, num_attention_heads=32, attention_head_dim=128,
    cross_attention_dim=4096, vae_scale_factors=(8, 32, 32), pos_embed_max_pos=20, base_height=2048, base_width=2048,
    audio_in_channels=128, audio_out_channels=128, audio_patch_size=1, audio_patch_size_t=1,
    audio_num_attention_heads=32, audio_attention_head_dim=64, audio_cross_attention_dim=2048, audio_scale_factor=4,
    audio_pos_embed_max_pos=20, audio_sampling_rate=16000, audio_hop_length=160, num_layers=REAL_LAYERS,
    activation_fn="gelu-approximate", qk_norm="rms_norm_across_heads", norm_elementwise_affine=False, norm_eps=1e-6,
    caption_channels=3840, attention_bias=True, attention_out_bias=True, rope_theta=10000.0,
    rope_double_precision=True, causal_offset=1, timestep_scale_multiplier=1000,
    cross_attn_timestep_scale_multiplier=1000, rope_type="split")
CONNECTORS_CONFIG = dict(
    caption_channels=3840, text_proj_in_factor=REAL_TEXT_LAYERS + 1, video_connector_num_attention_heads=30,
    video_connector_attention_head_dim=128, video_connector_num_layers=2, video_connector_num_learnable_registers=128,
    audio_connector_num_attention_heads=30, audio_connector_attention_head_dim=128, audio_connector_num_layers=2,
    audio_connector_num_learnable_registers=128, connector_rope_base_seq_len=4096, rope_theta=10000.0,
    rope_double_precision=True, causal_temporal_positioning=False, rope_type="split")
VIDEO_VAE_CONFIG = dict(
    in_channels=3, out_channels=3, latent_channels=128, block_out_channels=(256, 512, 1024, 2048),
    down_block_types=("LTX2VideoDownBlock3D",) * 4, decoder_block_out_channels=(256, 512, 1024),
    layers_per_block=(4, 6, 6, 2, 2), decoder_layers_per_block=(5, 5, 5, 5),
    spatio_temporal_scaling=(True, True, True, True), decoder_spatio_temporal_scaling=(True, True, True),
    decoder_inject_noise=(False, False, False, False),
    downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"), upsample_residual=(True, True, True),
    upsample_factor=(2, 2, 2), timestep_conditioning=False, patch_size=4, patch_size_t=1, resnet_norm_eps=1e-6,
    encoder_causal=True, decoder_causal=False, encoder_spatial_padding_mode="zeros",
    decoder_spatial_padding_mode="reflect", spatial_compression_ratio=32, temporal_compression_ratio=8)
AUDIO_VAE_CONFIG = dict(
    base_channels=128, output_channels=2, ch_mult=(1, 2, 4), num_res_blocks=2, attn_resolutions=None, in_channels=2,
    resolution=256, latent_channels=8, norm_type="pixel", causality_axis="height", dropout=0.0,
    mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160, is_causal=True, mel_bins=64, double_z=True)
VOCODER_CONFIG = dict(
    in_channels=128, hidden_channels=1024, out_channels=2, upsample_kernel_sizes=[16, 15, 8, 4, 4],
    upsample_factors=[6, 5, 2, 2, 2], resnet_kernel_sizes=[3, 7, 11], resnet_dilations=[[1, 3, 5]] * 3,
    leaky_relu_negative_slope=0.1, output_sampling_rate=24000)
# Gemma 3 12B's text model (google/gemma-3-12b-it config.json), less its depth and vocabulary.
GEMMA3_12B_TEXT_WIDTH = dict(hidden_size=3840, intermediate_size=15360, num_attention_heads=16, num_key_value_heads=8,
                             head_dim=256, query_pre_attn_scalar=256, sliding_window=1024, rms_norm_eps=1e-6,
                             max_position_embeddings=131072)


def describe(layers: int, text_layers: int, dtype: torch.dtype) -> dict:
    return {"transformer": f"LTX-2.0 19B (diffusers convert_ltx2_to_diffusers.py '2.0' config), {layers} of "
                           f"{REAL_LAYERS} blocks, random weights, {dtype}",
            "connectors": f"LTX-2.0 connectors (same source), text_proj_in for {text_layers + 1} stacked states "
                          f"instead of {REAL_TEXT_LAYERS + 1}, {dtype}",
            "text_encoder": f"Gemma 3 12B width, {text_layers} of {REAL_TEXT_LAYERS} layers, tiny vocabulary, "
                            f"tiny vision tower (never called), {dtype}",
            "vae": "LTX-2.0 video VAE (same source), float32", "audio_vae": "LTX-2.0 audio VAE, float32",
            "vocoder": "LTX-2.0 vocoder, float32", "scheduler": "FlowMatchEuler, LTX-2 scheduler_config.json"}


def text_encoder(vocab_size: int, text_layers: int):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = dict(vocab_size=vocab_size, num_hidden_layers=text_layers, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                **GEMMA3_12B_TEXT_WIDTH)
    vision = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=16,
                  patch_size=8)
    return Gemma3ForConditionalGeneration(Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                                       image_token_index=4, boi_token_index=5, eoi_token_index=6))


def write_ltx2_19b(out_dir: Path | str, layers: int = REAL_LAYERS, text_layers: int = 1, seed: int = 0,
                   dtype: torch.dtype = torch.bfloat16) -> Path:
    """Build and save the pipeline component by component (each freed before the next)."""
    import diffusers
    from diffusers import (AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler,
                           LTX2VideoTransformer3DModel)
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vgen_spm_") as tmp:
        spm_file = train_gemma_spm(Path(tmp) / SPM_FILE_NAME, seed=seed)
        tokenizer = gemma_tokenizer_from_spm(spm_file, REAL_MAX_LENGTH)
        tokenizer.save_pretrained(out_dir / "tokenizer")
        shutil.copyfile(spm_file, out_dir / "tokenizer" / SPM_FILE_NAME)
    FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER_CONFIG).save_pretrained(out_dir / "scheduler")
    torch.manual_seed(seed)
    builders = {
        "text_encoder": (lambda: text_encoder(len(tokenizer), text_layers), dtype),
        "connectors": (lambda: LTX2TextConnectors(**{**CONNECTORS_CONFIG, "text_proj_in_factor": text_layers + 1}),
                       dtype),
        "transformer": (lambda: LTX2VideoTransformer3DModel(**{**TRANSFORMER_CONFIG, "num_layers": layers}), dtype),
        "vae": (lambda: AutoencoderKLLTX2Video(**VIDEO_VAE_CONFIG), torch.float32),
        "audio_vae": (lambda: AutoencoderKLLTX2Audio(**AUDIO_VAE_CONFIG), torch.float32),
        "vocoder": (lambda: LTX2Vocoder(**VOCODER_CONFIG), torch.float32),
    }
    # What LTX2Pipeline.save_pretrained writes (the optional parts absent, the pipeline-local
    # classes under "ltx2").
    index = {"_class_name": "LTX2Pipeline", "_diffusers_version": diffusers.__version__,
             "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
             "tokenizer": ["transformers", type(tokenizer).__name__],
             **{part: [None, None] for part in ("duration_head", "processor", "prompt_enhancer")}}
    libraries = {"text_encoder": "transformers", "connectors": "ltx2", "vocoder": "ltx2"}
    for name, (build, part_dtype) in builders.items():
        with torch.no_grad():
            module = build().eval().to(part_dtype)
        module.save_pretrained(out_dir / name, safe_serialization=True, max_shard_size="50GB")
        index[name] = [libraries.get(name, "diffusers"), type(module).__name__]
        del module
        gc.collect()
    (out_dir / "model_index.json").write_text(json.dumps(index, indent=2))
    return out_dir
