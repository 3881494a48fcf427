"""A tiny, seeded, fully offline LTX-2 text-to-video-with-audio pipeline for tests.

Built locally (no model hub): a Gemma-layout SentencePiece BPE tokenizer (pad 0, eos 1, bos 2,
unk 3, no dummy prefix, byte fallback: what Gemma 3's tokenizer.model is) trained on the tiny
prompt corpus, a tiny Gemma 3 text encoder (a two-layer text model and a one-layer vision tower
the pipeline never calls), tiny text connectors, a tiny LTX2VideoTransformer3DModel, a tiny
AutoencoderKLLTX2Video shaped like the released one (spatial compression 32, temporal 8, so
frame counts are 8k+1), a tiny AutoencoderKLLTX2Audio and LTX2Vocoder, all with random weights
drawn after ``torch.manual_seed(seed)``, and FlowMatchEuler configured as LTX-2's
scheduler_config.json. The result is an ordinary ``diffusers.LTX2Pipeline`` saved with
``save_pretrained`` (plus ``tokenizer/tokenizer.model``), so exporting it follows the code path
of a real checkpoint directory.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

import torch

from .tiny_wan import tiny_corpus

SPM_FILE_NAME = "tokenizer.model"
TINY_VOCAB_SIZE = 640
# The tiny package's text length: LTX2Pipeline's max_sequence_length for it (the real one is 1024).
TINY_MAX_LENGTH = 32

# LTX-2's scheduler_config.json (the values that matter for the schedule).
LTX2_SCHEDULER_CONFIG = dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True,
                             base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                             max_image_seq_len=4096, shift_terminal=0.1, time_shift_type="exponential")


def train_gemma_spm(out_file: Path, seed: int = 0, vocab_size: int = TINY_VOCAB_SIZE) -> Path:
    """A Gemma-layout SentencePiece BPE model (ids: pad 0, eos 1, bos 2, unk 3; no dummy prefix,
    byte fallback, identity normalisation), deterministic for a seed."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(tiny_corpus(seed)), model_writer=buf, vocab_size=vocab_size, model_type="bpe",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", add_dummy_prefix=False, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, character_coverage=1.0, num_threads=1, minloglevel=2)
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_bytes(buf.getvalue())
    return out_file


def spm_vocab_and_merges(spm_file: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A SentencePiece BPE model's vocabulary and its merges, ordered as SentencePiece applies them
    (by the merged piece's score), the way transformers' converter derives them; the proto is read
    with transformers' bundled descriptor (sentencepiece's own needs a newer protobuf runtime)."""
    from transformers.utils import sentencepiece_model_pb2_new as spm_pb2

    proto = spm_pb2.ModelProto()
    proto.ParseFromString(Path(spm_file).read_bytes())
    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    merges = []
    for piece, rank in sorted(vocab.items(), key=lambda kv: kv[1]):
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                merges.append((vocab[left], vocab[right], rank, left, right))
    merges.sort(key=lambda m: (m[2], m[0], m[1]))
    return vocab, [(m[3], m[4]) for m in merges]


def gemma_tokenizer_from_spm(spm_file: Path, max_length: int):
    """transformers' GemmaTokenizer (BPE, byte fallback) with the SentencePiece model's vocabulary
    and merges, left padding as LTX2Pipeline sets it."""
    from transformers import GemmaTokenizer

    vocab, merges = spm_vocab_and_merges(spm_file)
    return GemmaTokenizer(vocab=vocab, merges=merges, model_max_length=max_length, padding_side="left",
                          add_bos_token=True, add_eos_token=False)


def tiny_text_encoder(vocab_size: int):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = dict(vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=256,
                sliding_window=8, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    vision = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=16,
                  patch_size=8)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=4,
                          boi_token_index=5, eoi_token_index=6)
    return Gemma3ForConditionalGeneration(config).eval()


def tiny_connectors(caption_channels: int, layers: int):
    from diffusers.pipelines.ltx2 import LTX2TextConnectors

    # Learnable registers as in LTX-2 (8 of them: the tiny text length is a multiple).
    return LTX2TextConnectors(caption_channels=caption_channels, text_proj_in_factor=layers + 1,
                              video_connector_num_attention_heads=2, video_connector_attention_head_dim=8,
                              video_connector_num_layers=1, video_connector_num_learnable_registers=8,
                              audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=8,
                              audio_connector_num_layers=1, audio_connector_num_learnable_registers=8,
                              connector_rope_base_seq_len=64, rope_theta=10000.0).eval()


def tiny_transformer(caption_channels: int, latent_channels: int, audio_channels: int):
    from diffusers import LTX2VideoTransformer3DModel

    return LTX2VideoTransformer3DModel(
        in_channels=latent_channels, out_channels=latent_channels, patch_size=1, patch_size_t=1,
        num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16, audio_in_channels=audio_channels,
        audio_out_channels=audio_channels, audio_num_attention_heads=2, audio_attention_head_dim=4,
        audio_cross_attention_dim=8, num_layers=2, caption_channels=caption_channels).eval()


def tiny_vae(latent_channels: int = 8, seed: int = 0):
    from diffusers import AutoencoderKLLTX2Video

    # LTX-2's layout with few channels: patch 4, then spatial, temporal and two spatiotemporal
    # downsamplers (spatial 32, temporal 8); an unconditioned decoder, as LTX-2's.
    vae = AutoencoderKLLTX2Video(
        latent_channels=latent_channels, block_out_channels=(8, 16, 32, 32), layers_per_block=(1, 1, 1, 1, 1),
        decoder_block_out_channels=(8, 16, 32), decoder_layers_per_block=(1, 1, 1, 1),
        spatio_temporal_scaling=(True, True, True, True), decoder_spatio_temporal_scaling=(True, True, True),
        decoder_inject_noise=(False, False, False, False), upsample_residual=(True, True, True),
        upsample_factor=(2, 2, 2), timestep_conditioning=False, patch_size=4, patch_size_t=1,
        spatial_compression_ratio=32, temporal_compression_ratio=8).eval()
    vae.use_framewise_decoding = False
    gen = torch.Generator().manual_seed(seed + 7)  # non-trivial statistics: un-normalisation is exercised
    vae.latents_mean.copy_(torch.randn(latent_channels, generator=gen) * 0.1)
    vae.latents_std.copy_(torch.rand(latent_channels, generator=gen) + 0.5)
    return vae


def tiny_audio_vae(seed: int = 0):
    from diffusers import AutoencoderKLLTX2Audio

    # Two downsamplings (the pipeline's fixed factor 4 in time and mel bins); the latents' statistics
    # are per packed feature (latent channels x latent mel bins = base_channels, as in LTX-2).
    vae = AutoencoderKLLTX2Audio(base_channels=16, output_channels=2, ch_mult=(1, 2, 4), num_res_blocks=1,
                                 in_channels=2, resolution=32, latent_channels=4, mel_bins=16).eval()
    gen = torch.Generator().manual_seed(seed + 11)
    for name in ("latents_mean", "latents_std"):
        buf = getattr(vae, name, None)
        if isinstance(buf, torch.Tensor) and buf.is_floating_point():
            buf.copy_(torch.randn(buf.shape, generator=gen) * 0.1 if name == "latents_mean"
                      else torch.rand(buf.shape, generator=gen) + 0.5)
    return vae


def tiny_vocoder(audio_vae):
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    # Upsampling by the mel hop (8 x 5 x 4 = 160), as the released vocoder: the sound lasts as
    # long as the clip.
    return LTX2Vocoder(in_channels=audio_vae.config.output_channels * audio_vae.config.mel_bins, hidden_channels=16,
                       out_channels=2, upsample_kernel_sizes=[16, 10, 8], upsample_factors=[8, 5, 4], resnet_kernel_sizes=[3],
                       resnet_dilations=[[1, 3, 5]], output_sampling_rate=16000).eval()


def make_scheduler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER_CONFIG)


def build_tiny_ltx2_pipeline(seed: int = 0, workdir: Path | str | None = None):
    """The tiny random LTX2Pipeline (eval mode, float32); ``workdir`` receives tokenizer.model."""
    from diffusers import LTX2Pipeline

    workdir = Path(workdir or tempfile.mkdtemp(prefix="vgen_tiny_ltx2_"))
    spm_file = train_gemma_spm(workdir / SPM_FILE_NAME, seed=seed)
    tokenizer = gemma_tokenizer_from_spm(spm_file, TINY_MAX_LENGTH)
    torch.manual_seed(seed)
    text_encoder = tiny_text_encoder(len(tokenizer))
    width = text_encoder.config.text_config.hidden_size
    connectors = tiny_connectors(width, text_encoder.config.text_config.num_hidden_layers)
    audio_vae = tiny_audio_vae(seed)
    audio_channels = audio_vae.config.latent_channels * (audio_vae.config.mel_bins // audio_vae.mel_compression_ratio)
    transformer = tiny_transformer(width, 8, audio_channels)
    vae = tiny_vae(seed=seed)
    vocoder = tiny_vocoder(audio_vae)
    pipe = LTX2Pipeline(scheduler=make_scheduler(), vae=vae, audio_vae=audio_vae, text_encoder=text_encoder,
                        tokenizer=tokenizer, connectors=connectors, transformer=transformer, vocoder=vocoder)
    pipe.set_progress_bar_config(disable=True)
    pipe._vgen_spm_file = str(spm_file)  # noqa: SLF001 - remembered for write_tiny_ltx2
    return pipe


def write_tiny_ltx2(out_dir: Path | str, seed: int = 0) -> Path:
    """Build the tiny pipeline and save it as a diffusers directory."""
    out_dir = Path(out_dir)
    with tempfile.TemporaryDirectory(prefix="vgen_spm_") as tmp:
        pipe = build_tiny_ltx2_pipeline(seed=seed, workdir=tmp)
        pipe.save_pretrained(out_dir, safe_serialization=True)
        shutil.copyfile(pipe._vgen_spm_file, out_dir / "tokenizer" / SPM_FILE_NAME)  # noqa: SLF001
    return out_dir
