"""A tiny, seeded, fully offline LTX-Video text-to-video pipeline for tests.

Built locally like tiny_wan: the same SentencePiece unigram tokenizer (T5 layout: pad 0,
eos 1, unk 2), a tiny T5 encoder, a tiny LTXVideoTransformer3DModel and a tiny
AutoencoderKLLTXVideo (timestep-conditioned decoder, non-trivial latents mean/std), all with
random weights drawn after ``torch.manual_seed(seed)``, and FlowMatchEuler configured as the
released LTX-Video checkpoints configure it (resolution-dependent exponential shift, terminal
sigma 0.1). The result is an ordinary ``diffusers.LTXPipeline`` saved with
``save_pretrained`` (plus ``tokenizer/spiece.model``), so exporting it follows the code path
of a real checkpoint directory.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from .tiny_wan import SPM_FILE_NAME, tokenizer_from_spm, train_tiny_spm

# LTX-Video 0.9.x's scheduler_config.json (the values that matter for the schedule).
LTX_SCHEDULER_CONFIG = dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True,
                            base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                            max_image_seq_len=4096, shift_terminal=0.1, time_shift_type="exponential")


def tiny_text_encoder(vocab_size: int):
    from transformers import T5Config, T5EncoderModel

    config = T5Config(vocab_size=vocab_size, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      dropout_rate=0.0, feed_forward_proj="gated-gelu", is_encoder_decoder=False,
                      use_cache=False)
    return T5EncoderModel(config).eval()


def tiny_transformer(caption_channels: int = 32, latent_channels: int = 8):
    from diffusers import LTXVideoTransformer3DModel

    # inner dim 16: dim % 6 != 0, so the rope's padding path runs too.
    return LTXVideoTransformer3DModel(in_channels=latent_channels, out_channels=latent_channels, patch_size=1,
                                      patch_size_t=1, num_attention_heads=2, attention_head_dim=8,
                                      cross_attention_dim=16, num_layers=2, caption_channels=caption_channels).eval()


def tiny_vae(latent_channels: int = 8, seed: int = 0):
    from diffusers import AutoencoderKLLTXVideo

    # Shaped like LTX-Video 0.9.1's VAE (residual 2x upsamplers, timestep-conditioned decoder),
    # with few channels: spatial compression 4 * 2**3 = 32, temporal 2**3 = 8.
    vae = AutoencoderKLLTXVideo(
        latent_channels=latent_channels,
        block_out_channels=(8, 16, 32, 32),
        layers_per_block=(1, 1, 1, 1, 1),
        spatio_temporal_scaling=(True, True, True, False),
        decoder_block_out_channels=(8, 16, 32),
        decoder_layers_per_block=(1, 1, 1, 1),
        decoder_spatio_temporal_scaling=(True, True, True),
        decoder_inject_noise=(False, False, False, False),
        upsample_residual=(True, True, True),
        upsample_factor=(2, 2, 2),
        timestep_conditioning=True,
        patch_size=4,
        patch_size_t=1,
        encoder_causal=True,
        decoder_causal=False,
    ).eval()
    # Random weights leave the timestep embedder's effect small; the latents' statistics are
    # made non-trivial so that un-normalisation is exercised.
    gen = torch.Generator().manual_seed(seed + 7)
    vae.latents_mean.copy_(torch.randn(latent_channels, generator=gen) * 0.1)
    vae.latents_std.copy_(torch.rand(latent_channels, generator=gen) + 0.5)
    return vae


def make_scheduler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(**LTX_SCHEDULER_CONFIG)


def build_tiny_ltx_pipeline(seed: int = 0, workdir: Path | str | None = None):
    """The tiny random LTXPipeline (eval mode, float32); ``workdir`` receives spiece.model."""
    from diffusers import LTXPipeline

    workdir = Path(workdir or tempfile.mkdtemp(prefix="vgen_tiny_ltx_"))
    spm_file = train_tiny_spm(workdir / SPM_FILE_NAME, seed=seed)
    tokenizer = tokenizer_from_spm(spm_file)
    torch.manual_seed(seed)
    text_encoder = tiny_text_encoder(len(tokenizer))
    transformer = tiny_transformer(caption_channels=text_encoder.config.d_model)
    vae = tiny_vae(seed=seed)
    pipe = LTXPipeline(scheduler=make_scheduler(), vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                       transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    pipe._vgen_spm_file = str(spm_file)  # noqa: SLF001 - remembered for write_tiny_ltx
    return pipe


def write_tiny_ltx(out_dir: Path | str, seed: int = 0) -> Path:
    """Build the tiny pipeline and save it as a diffusers directory."""
    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory(prefix="vgen_spm_") as tmp:
        pipe = build_tiny_ltx_pipeline(seed=seed, workdir=tmp)
        pipe.save_pretrained(out_dir, safe_serialization=True)
        shutil.copyfile(pipe._vgen_spm_file, out_dir / "tokenizer" / SPM_FILE_NAME)  # noqa: SLF001
    return out_dir
