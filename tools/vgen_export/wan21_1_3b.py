"""A real-size Wan 2.1 T2V 1.3B diffusers directory with random weights, built offline.

The published Wan2.1-T2V-1.3B-Diffusers configuration: WanTransformer3DModel with 30 layers of
width 1536 (12 heads of 128), FFN 8960, text_dim 4096; AutoencoderKLWan's defaults (Wan 2.1's
VAE); UniPC with flow_shift 3.0 (480p). Weights are drawn at random (seeded), so the speed,
memory and numerics of the denoiser and the VAE are the real model's, the pictures are noise.

One deliberate reduction, recorded by ``describe()``: the text encoder is UMT5 with the XXL
width (d_model 4096, 64 heads of 64, d_ff 10240, gated GELU) but ``text_layers`` layers (the
real one has 24) and the tiny SentencePiece vocabulary: a real-size UMT5-XXL is 5.7 B
parameters (11.4 GB in bf16) whose random initialisation, saving and export on a bare
machine's CPU would take most of a GPU check's minutes, while at run time it is one forward
per prompt (about 0.1 s on an H100). ``text_layers=24`` builds the real depth.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .tiny_wan import SPM_FILE_NAME, make_scheduler, tokenizer_from_spm, train_tiny_spm

TRANSFORMER_CONFIG = dict(
    patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
    text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None, added_kv_proj_dim=None, rope_max_seq_len=1024,
)
UMT5_XXL_WIDTH = dict(d_model=4096, d_kv=64, d_ff=10240, num_heads=64, relative_attention_num_buckets=32,
                      relative_attention_max_distance=128, feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6)
REAL_TEXT_LAYERS = 24
FLOW_SHIFT_480P = 3.0


def describe(text_layers: int) -> dict:
    return {"transformer": "Wan2.1-T2V-1.3B (published config), random weights",
            "vae": "AutoencoderKLWan defaults (Wan 2.1 VAE), random weights",
            "text_encoder": f"UMT5-XXL width, {text_layers} of {REAL_TEXT_LAYERS} layers, tiny vocabulary, random weights",
            "scheduler": f"UniPCMultistepScheduler flow_shift {FLOW_SHIFT_480P}"}


def write_wan21_1_3b(out_dir: Path | str, text_layers: int = 1, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                     device: str = "cpu") -> Path:
    """Build the pipeline on ``device`` (initialising 1.3 B parameters is seconds on a GPU, tens
    of seconds on a CPU), cast the transformer and text encoder to ``dtype`` (the VAE stays
    float32, as in diffusers' Wan example) and save it with ``save_pretrained``."""
    import tempfile

    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory(prefix="vgen_spm_") as tmp:
        spm_file = train_tiny_spm(Path(tmp) / SPM_FILE_NAME, seed=seed)
        tokenizer = tokenizer_from_spm(spm_file)
        torch.manual_seed(seed)
        with torch.device(device), torch.no_grad():
            text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), num_layers=text_layers,
                                                       dropout_rate=0.0, is_encoder_decoder=False, use_cache=False,
                                                       **UMT5_XXL_WIDTH)).eval().to(dtype)
            transformer = WanTransformer3DModel(**TRANSFORMER_CONFIG).eval().to(dtype)
            vae = AutoencoderKLWan().eval()
        pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer, vae=vae,
                           scheduler=make_scheduler("unipc", flow_shift=FLOW_SHIFT_480P))
        pipe.save_pretrained(out_dir, safe_serialization=True)
        import shutil

        shutil.copyfile(spm_file, out_dir / "tokenizer" / SPM_FILE_NAME)
    return out_dir
