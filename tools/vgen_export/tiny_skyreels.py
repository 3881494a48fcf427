"""A tiny, seeded, fully offline SkyReels-V2 diffusion-forcing pipeline for tests.

SkyReels-V2 DF is Wan 2.1's architecture with a transformer that takes one timestep per latent
frame (``SkyReelsV2Transformer3DModel``: diffusion forcing, an fps embedding) and runs under
``SkyReelsV2DiffusionForcingPipeline`` (text-to-video, long video) and
``SkyReelsV2DiffusionForcingVideoToVideoPipeline`` (extension of a video): the same components.
The text encoder, tokenizer and VAE are tiny_wan's; the transformer is drawn after
``torch.manual_seed(seed)`` like the rest. ``write_tiny_skyreels`` saves it with
``save_pretrained`` (plus ``tokenizer/spiece.model``) so that exporting it follows the code path
of a real checkpoint such as SkyReels-V2-DF-1.3B-540P-Diffusers.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .tiny_wan import tiny_pipeline_done, tiny_text_side, tiny_vae, write_tiny_pipeline

# SkyReels-V2-DF's scheduler: UniPC on flow sigmas, shift 8 (its model card's 540P setting).
TINY_FLOW_SHIFT = 8.0


def tiny_skyreels_transformer(text_dim: int = 32, num_frame_per_block: int = 1):
    """SkyReels-V2's transformer shrunk, with the fps embedding (inject_sample_info) that the DF
    checkpoints have."""
    from diffusers import SkyReelsV2Transformer3DModel

    return SkyReelsV2Transformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=16,
        out_channels=16,
        text_dim=text_dim,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
        inject_sample_info=True,
        num_frame_per_block=num_frame_per_block,
    ).eval()


def tiny_scheduler():
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(num_train_timesteps=1000, prediction_type="flow_prediction", use_flow_sigmas=True,
                                   flow_shift=TINY_FLOW_SHIFT, solver_order=2)


def build_tiny_skyreels_pipeline(seed: int = 0, workdir: Path | str | None = None):
    """The tiny random SkyReelsV2DiffusionForcingPipeline (eval mode, float32)."""
    from diffusers import SkyReelsV2DiffusionForcingPipeline

    spm_file, tokenizer, text_encoder = tiny_text_side(seed, workdir or tempfile.mkdtemp(prefix="vgen_tiny_skyreels_"))
    transformer = tiny_skyreels_transformer(text_dim=text_encoder.config.d_model)
    pipe = SkyReelsV2DiffusionForcingPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer,
                                              vae=tiny_vae(), scheduler=tiny_scheduler())
    return tiny_pipeline_done(pipe, spm_file)


def write_tiny_skyreels(out_dir: Path | str, seed: int = 0) -> Path:
    """Build the tiny pipeline and save it as a diffusers directory (with tokenizer/spiece.model)."""
    return write_tiny_pipeline(build_tiny_skyreels_pipeline, out_dir, seed=seed)
