"""A tiny, seeded, fully offline Wan 2.1 text-to-video pipeline for tests.

Everything is built locally (no Hugging Face hub): a small SentencePiece unigram
tokenizer trained on a generated prompt corpus, a tiny UMT5 encoder from a local
config, a tiny WanTransformer3DModel and a tiny AutoencoderKLWan, all with random
weights drawn after ``torch.manual_seed(seed)``. The result is an ordinary
``diffusers.WanPipeline``: ``save_tiny_wan`` writes it with ``save_pretrained``
(plus ``tokenizer/spiece.model``), so exporting it follows exactly the code path
used for a real checkpoint directory such as Wan2.1-T2V-1.3B-Diffusers.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import torch

SPM_FILE_NAME = "spiece.model"
TINY_VOCAB_SIZE = 256

_COLORS = "red green blue yellow white black orange purple pink gray brown cyan".split()
_THINGS = (
    "circle square triangle star ball cube cat dog bird car tree house person boat fish flower"
).split()
_MOTIONS = (
    "moving left|moving right|moving up|moving down|spinning|bouncing|growing|shrinking|"
    "floating|falling|jumping|rotating slowly"
).split("|")
_BACKGROUNDS = (
    "black background|white background|blue sky|green field|city street|sandy beach|"
    "dark room|snowy mountain"
).split("|")
_GENERAL = (
    "time people year way day man thing woman life child world school state family group "
    "country problem hand part place case week system program question work number night "
    "point home water room mother area money story fact month lot right study book eye job "
    "word business side kind head service friend father power hour game line end member law "
    "city community name team minute idea kid body back parent face level office door health "
    "art history party result change morning reason girl boy moment air teacher force music "
    "market sense plan interest experience effect class control care field role heart show "
    "light voice mind price view town road arm value building action model season society "
    "space ground form event matter center couple site project activity table need court "
    "situation cost figure street image phone data picture piece land product wall news test "
    "movie north love support baby computer type attention film source hair window the quick "
    "brown fox jumps over lazy . a video of , with and in at camera zoom pan close up wide "
    "shot cinematic bright dark low quality blurry static overexposed worst text watermark"
).split()


def tiny_corpus(seed: int = 0) -> list[str]:
    """Prompt-like sentences plus general words, deterministic for a seed."""
    rng = random.Random(seed)
    lines = [
        f"a {rng.choice(_COLORS)} {rng.choice(_THINGS)} {rng.choice(_MOTIONS)} "
        f"on a {rng.choice(_BACKGROUNDS)}"
        for _ in range(2000)
    ]
    lines += [" ".join(rng.choice(_GENERAL) for _ in range(8)) for _ in range(3000)]
    return lines


def train_tiny_spm(out_file: Path, seed: int = 0, vocab_size: int = TINY_VOCAB_SIZE) -> Path:
    """Train a T5-style SentencePiece unigram model: pad=0, eos=1, unk=2, no bos.

    Training is single-threaded and deterministic for a given corpus.
    """
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(tiny_corpus(seed)),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        pad_piece="<pad>",
        eos_piece="</s>",
        unk_piece="<unk>",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_bytes(buf.getvalue())
    return out_file


def tokenizer_from_spm(spm_file: Path):
    """A transformers T5Tokenizer equivalent to the SentencePiece model (no extra ids).

    transformers 5.x no longer converts a ``.model`` given as ``vocab_file`` with the
    pinned protobuf (sentencepiece's own generated ``*_pb2`` needs a newer runtime), so
    the model proto is read with transformers' bundled pure-python descriptor and the
    vocabulary plus the normaliser's precompiled charsmap are passed explicitly.
    """
    from transformers import T5Tokenizer
    from transformers.utils import sentencepiece_model_pb2_new as spm_pb2

    proto = spm_pb2.ModelProto()
    proto.ParseFromString(Path(spm_file).read_bytes())
    vocab = [(p.piece, p.score) for p in proto.pieces]
    return T5Tokenizer(
        vocab=vocab,
        extra_ids=0,
        _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap or None,
    )


def tiny_text_encoder(vocab_size: int):
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(
        vocab_size=vocab_size,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        dropout_rate=0.0,
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=False,
        use_cache=False,
    )
    return UMT5EncoderModel(config).eval()


def tiny_transformer(text_dim: int = 32, image_dim: int | None = None, latent_channels: int = 16,
                     pos_embed_seq_len: int | None = None, image_channels: bool | None = None):
    """Wan 2.1's transformer shrunk; with ``image_dim`` the image-to-video one (36 input
    channels: noise 16 + mask 4 + condition 16, and image cross-attention keys/values);
    ``image_channels`` without ``image_dim``: Wan 2.2 A14B I2V's experts (the 36 channels, no
    image cross-attention);
    ``latent_channels`` 48: Wan 2.2 TI2V-5B's (the z_dim-48 VAE's latents in and out);
    ``pos_embed_seq_len`` (2 x image tokens): Wan 2.1 FLF2V's, first and last frame's tokens
    with a learned position embedding (drawn at random here: diffusers initialises it to 0)."""
    from diffusers import WanTransformer3DModel

    heads, head_dim = 2, 12
    if image_channels is None:
        image_channels = image_dim is not None
    model = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=heads,
        attention_head_dim=head_dim,
        in_channels=2 * latent_channels + 4 if image_channels else latent_channels,
        out_channels=latent_channels,
        image_dim=image_dim,
        added_kv_proj_dim=None if image_dim is None else heads * head_dim,
        text_dim=text_dim,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
        pos_embed_seq_len=pos_embed_seq_len,
    ).eval()
    if pos_embed_seq_len is not None:
        with torch.no_grad():
            model.condition_embedder.image_embedder.pos_embed.normal_(std=0.5)
    return model


def tiny_vace_transformer(text_dim: int = 32):
    """Wan 2.1 VACE's transformer shrunk: the tiny T2V one plus a VACE block per listed layer
    (both of its two layers); control input = inactive 16 + reactive 16 + the 8x8 mask 64."""
    from diffusers import WanVACETransformer3DModel

    return WanVACETransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16, out_channels=16,
        text_dim=text_dim, freq_dim=256, ffn_dim=32, num_layers=2, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", rope_max_seq_len=32, vace_layers=[0, 1], vace_in_channels=96).eval()


TINY_CLIP_SIZE = 32


def tiny_image_encoder():
    """A tiny CLIP vision tower (Wan 2.1 I2V uses CLIP ViT-H/14's penultimate hidden states)
    and its image processor, resizing and cropping to TINY_CLIP_SIZE instead of 224."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                              image_size=TINY_CLIP_SIZE, patch_size=8, projection_dim=32)
    processor = CLIPImageProcessor(size={"shortest_edge": TINY_CLIP_SIZE},
                                   crop_size={"height": TINY_CLIP_SIZE, "width": TINY_CLIP_SIZE})
    return CLIPVisionModel(config).eval(), processor


def tiny_vae():
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(
        base_dim=3,
        z_dim=16,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
    ).eval()


def tiny_vae_22(seed: int = 0):
    """Wan 2.2's VAE shrunk: z_dim 48, residual down/up blocks, the video patchified 2x2 into
    12 channels before the encoder (and back after the decoder), so one latent pixel covers
    16x16 pixels. Its latents_mean/std are drawn from ``seed`` (not 0/1), so that a runtime
    that skipped or swapped the normalisation fails the parity test."""
    from diffusers import AutoencoderKLWan

    g = torch.Generator().manual_seed(seed + 22)
    mean = [round(float(v), 4) for v in (torch.rand(48, generator=g) - 0.5)]
    std = [round(float(v), 4) for v in (0.5 + torch.rand(48, generator=g))]
    return AutoencoderKLWan(
        base_dim=8,
        decoder_base_dim=12,
        z_dim=48,
        dim_mult=[1, 2, 2, 2],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        is_residual=True,
        in_channels=12,
        out_channels=12,
        patch_size=2,
        scale_factor_temporal=4,
        scale_factor_spatial=16,
        latents_mean=mean,
        latents_std=std,
    ).eval()


def make_scheduler(kind: str = "unipc", flow_shift: float = 3.0):
    """Wan's default UniPC flow scheduler, or FlowMatchEuler as the alternative."""
    if kind == "unipc":
        from diffusers import UniPCMultistepScheduler

        return UniPCMultistepScheduler(
            num_train_timesteps=1000,
            prediction_type="flow_prediction",
            use_flow_sigmas=True,
            flow_shift=flow_shift,
            solver_order=2,
        )
    if kind == "flow_euler":
        from diffusers import FlowMatchEulerDiscreteScheduler

        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=flow_shift)
    raise ValueError(f"unknown scheduler kind {kind!r} (unipc | flow_euler)")


VARIANTS = ("t2v", "i2v", "a14b-t2v", "a14b-i2v", "ti2v", "flf2v", "vace")
TINY_BOUNDARY_RATIO = 0.875  # Wan2.2-T2V-A14B's
TINY_I2V_BOUNDARY_RATIO = 0.9  # Wan2.2-I2V-A14B's


def build_tiny_wan_pipeline(seed: int = 0, workdir: Path | str | None = None, scheduler: str = "unipc",
                            variant: str = "t2v"):
    """Build the tiny random WanPipeline (``variant`` "t2v"), WanImageToVideoPipeline ("i2v",
    Wan 2.1 I2V with a tiny CLIP image encoder) or Wan 2.2 A14B's two-expert WanPipeline
    ("a14b-t2v": transformer for high noise, transformer_2 below boundary_ratio) or Wan 2.2
    TI2V-5B's WanPipeline ("ti2v": z_dim-48 VAE, expand_timesteps; WanImageToVideoPipeline runs
    the same components for image-to-video) or Wan 2.1 FLF2V's WanImageToVideoPipeline ("flf2v":
    the I2V one with a first and a last frame) or Wan 2.2 I2V-A14B's WanImageToVideoPipeline
    ("a14b-i2v": two 36-channel experts, no image encoder) or Wan 2.1 VACE's WanVACEPipeline
    ("vace": the T2V transformer with VACE blocks; control video, mask, reference images). ``workdir`` receives the trained
    ``spiece.model`` (a temporary directory is used when None). Returns the pipeline (eval
    mode, float32)."""
    import tempfile

    from diffusers import WanImageToVideoPipeline, WanPipeline

    if variant not in VARIANTS:
        raise ValueError(f"unknown tiny Wan variant {variant!r} ({' | '.join(VARIANTS)})")
    if workdir is None:
        workdir = tempfile.mkdtemp(prefix="vgen_tiny_wan_")
    spm_file, tokenizer, text_encoder = tiny_text_side(seed, workdir)
    if variant == "t2v":
        transformer = tiny_transformer(text_dim=text_encoder.config.d_model)
        vae = tiny_vae()
        pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer, vae=vae,
                           scheduler=make_scheduler(scheduler))
    elif variant == "a14b-t2v":
        transformer = tiny_transformer(text_dim=text_encoder.config.d_model)
        transformer_2 = tiny_transformer(text_dim=text_encoder.config.d_model)  # other random weights
        vae = tiny_vae()
        pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer, vae=vae,
                           scheduler=make_scheduler(scheduler), transformer_2=transformer_2,
                           boundary_ratio=TINY_BOUNDARY_RATIO)
    elif variant == "a14b-i2v":
        experts = [tiny_transformer(text_dim=text_encoder.config.d_model, image_channels=True) for _ in range(2)]
        pipe = WanImageToVideoPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=experts[0],
                                       transformer_2=experts[1], vae=tiny_vae(), scheduler=make_scheduler(scheduler),
                                       boundary_ratio=TINY_I2V_BOUNDARY_RATIO)
    elif variant == "vace":
        from diffusers import WanVACEPipeline

        pipe = WanVACEPipeline(tokenizer=tokenizer, text_encoder=text_encoder,
                               transformer=tiny_vace_transformer(text_encoder.config.d_model), vae=tiny_vae(),
                               scheduler=make_scheduler(scheduler))
    elif variant == "ti2v":
        transformer = tiny_transformer(text_dim=text_encoder.config.d_model, latent_channels=48)
        vae = tiny_vae_22(seed)
        pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer, vae=vae,
                           scheduler=make_scheduler(scheduler), expand_timesteps=True)
    else:
        image_encoder, image_processor = tiny_image_encoder()
        tokens = (TINY_CLIP_SIZE // image_encoder.config.patch_size) ** 2 + 1  # + the class token
        transformer = tiny_transformer(text_dim=text_encoder.config.d_model, image_dim=image_encoder.config.hidden_size,
                                       pos_embed_seq_len=2 * tokens if variant == "flf2v" else None)
        vae = tiny_vae()
        pipe = WanImageToVideoPipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer,
                                       vae=vae, scheduler=make_scheduler(scheduler), image_encoder=image_encoder,
                                       image_processor=image_processor)
    return tiny_pipeline_done(pipe, spm_file)


# What every tiny pipeline built on these parts shares (tiny_skyreels.py too): the text side drawn
# first, the finished pipeline remembering its spiece.model, and the save.


def tiny_text_side(seed: int, workdir: Path | str):
    """(spiece.model trained into ``workdir``, its tokenizer, the tiny UMT5 encoder drawn right
    after ``torch.manual_seed(seed)``): a tiny pipeline's first random draws, so that the rest
    follow from the same seed state."""
    spm_file = train_tiny_spm(Path(workdir) / SPM_FILE_NAME, seed=seed)
    tokenizer = tokenizer_from_spm(spm_file)
    torch.manual_seed(seed)
    return spm_file, tokenizer, tiny_text_encoder(len(tokenizer))


def tiny_pipeline_done(pipe, spm_file: Path):
    """``pipe`` without progress bars, remembering its spiece.model for save_tiny_wan."""
    pipe.set_progress_bar_config(disable=True)
    pipe._vgen_spm_file = str(spm_file)  # noqa: SLF001
    return pipe


def save_tiny_wan(pipe, out_dir: Path | str) -> Path:
    """``save_pretrained`` plus ``tokenizer/spiece.model`` (as in the real Wan repos)."""
    import shutil

    out_dir = Path(out_dir)
    pipe.save_pretrained(out_dir, safe_serialization=True)
    shutil.copyfile(pipe._vgen_spm_file, out_dir / "tokenizer" / SPM_FILE_NAME)  # noqa: SLF001
    return out_dir


def write_tiny_pipeline(build, out_dir: Path | str, **options) -> Path:
    """``build(workdir=<a temporary directory for spiece.model>, **options)``, saved with
    save_tiny_wan as a diffusers directory."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vgen_spm_") as tmp:
        return save_tiny_wan(build(workdir=tmp, **options), out_dir)


def write_tiny_wan(out_dir: Path | str, seed: int = 0, scheduler: str = "unipc", variant: str = "t2v") -> Path:
    """Build the tiny pipeline (``variant``: see build_tiny_wan_pipeline) and save it as a
    diffusers directory."""
    return write_tiny_pipeline(build_tiny_wan_pipeline, out_dir, seed=seed, scheduler=scheduler, variant=variant)
