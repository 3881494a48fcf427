"""The traceable modules of the HunyuanVideo 1.5 export (vgen_export.hunyuan15 for text-to-video,
vgen_export.hunyuan15_i2v for what image-to-video adds): the wrappers whose traces become the
package's TorchScript files, and the VAE attention mask that a trace can follow at any size.
Shared by both exporter modules, which is why it is a module of its own (they must not import
each other).
"""

from __future__ import annotations

import contextlib

import torch

from .common import ExportRefused  # noqa: F401 - the exporters' one refusal, named here for hunyuan15*.py


class TextEncoderExport(torch.nn.Module):
    def __init__(self, encoder, skip_layers: int, crop_start: int):
        super().__init__()
        self.encoder, self.skip, self.crop = encoder, skip_layers, crop_start

    def forward(self, input_ids, attention_mask):
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
        return states[-(self.skip + 1)][:, self.crop:]


class ByT5Export(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask):
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]


class TransformerExport(torch.nn.Module):
    """Text-to-video: cat([latents, zeros (condition), zeros (mask)]) and zero image embeddings.

    HunyuanVideo15Transformer3DModel.forward step for step, except the per-row Python loop that
    moves each row's valid text tokens in front of the padding: a trace would unroll it at the
    trace's batch size. Here it is a stable sort of the rows' tokens by validity, which puts the
    same tokens in the same order (valid image, ByT5, Qwen tokens, then the invalid ones, padding
    zeroed) for any batch; the export checks compare it with diffusers' forward."""

    def __init__(self, transformer, image_tokens: int):
        super().__init__()
        self.transformer, self.image_tokens = transformer, image_tokens
        self.image_dim = int(transformer.config.image_embed_dim)

    def forward(self, latents, timestep, text, mask, text_2, mask_2):
        b = latents.shape[0]
        x = torch.cat([latents, torch.zeros_like(latents), torch.zeros_like(latents[:, :1])], 1)
        image = torch.zeros(b, self.image_tokens, self.image_dim, dtype=latents.dtype, device=latents.device)
        return self.denoise(x, timestep, text, mask, text_2, mask_2, image, False)

    def denoise(self, x, timestep, text, mask, text_2, mask_2, image, with_image: bool):
        """The transformer on the concatenated input x [B,2C+1,F,H,W]; ``with_image``: the image
        tokens attend (I2V), else they are zeroed and masked out (T2V's is_t2v branch)."""
        tr = self.transformer
        b, _, f, h, w = x.shape
        rope = tr.rope(x)
        temb = tr.time_embed(timestep)
        hidden = tr.x_embedder(x)
        enc = tr.context_embedder(text, timestep, mask)
        enc = enc + tr.cond_type_embed(torch.zeros_like(enc[:, :, 0], dtype=torch.long))
        enc_2 = tr.context_embedder_2(text_2)
        enc_2 = enc_2 + tr.cond_type_embed(torch.ones_like(enc_2[:, :, 0], dtype=torch.long))
        enc_3 = tr.image_embedder(image)
        if not with_image:
            enc_3 = enc_3 * 0.0  # is_t2v
        enc_3 = enc_3 + tr.cond_type_embed(2 * torch.ones_like(enc_3[:, :, 0], dtype=torch.long))
        valid, valid_2 = mask.bool(), mask_2.bool()
        valid_3 = (torch.ones_like if with_image else torch.zeros_like)(enc_3[:, :, 0], dtype=torch.bool)
        zero = torch.zeros((), dtype=enc.dtype, device=enc.device)
        states = torch.cat([enc_3, torch.where(valid_2[..., None], enc_2, zero), torch.where(valid[..., None], enc, zero)], 1)
        masks = torch.cat([valid_3, valid_2, valid], 1)
        order = torch.sort((~masks).to(torch.int32), dim=1, stable=True).indices
        states = states.gather(1, order[..., None].expand(-1, -1, states.shape[2]))
        masks = masks.gather(1, order)
        for block in tr.transformer_blocks:
            hidden, states = block(hidden, states, temb, masks, rope)
        hidden = tr.proj_out(tr.norm_out(hidden, temb))
        return hidden.reshape(b, f, h, w, -1).permute(0, 4, 1, 2, 3)


class I2VTransformerExport(TransformerExport):
    """Image-to-video: cat([latents, cond padded with zero frames, mask 1 on frame 0]) and the
    image tokens, as HunyuanVideo15ImageToVideoPipeline builds them each step."""

    def forward(self, latents, timestep, text, mask, text_2, mask_2, cond, image):
        rest = torch.zeros_like(latents[:, :, 1:])
        frame_mask = torch.cat([torch.ones_like(latents[:, :1, :1]), torch.zeros_like(rest[:, :1])], 2)
        x = torch.cat([latents, torch.cat([cond, rest], 2), frame_mask], 1)
        return self.denoise(x, timestep, text, mask, text_2, mask_2, image, True)


class VaeDecoderExport(torch.nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.decoder = vae.decoder

    def forward(self, z):
        return self.decoder(z)


def causal_frame_mask(n_frame: int, n_hw: int, dtype, device, batch_size: int | None = None):
    """HunyuanVideo15AttnBlock.prepare_causal_attention_mask with tensor ops: the same values
    (0 where key frame <= query frame, else -inf), traceable at any size; batch_size unused."""
    frame = torch.arange(n_frame * n_hw, device=device) // n_hw
    zero = torch.zeros((), dtype=dtype, device=device)
    mask = torch.where(frame[None, :] <= frame[:, None], zero, torch.full((), float("-inf"), dtype=dtype, device=device))
    return mask  # [S, S]: broadcast over the batch by SDPA (a traced expand would freeze the batch size)


@contextlib.contextmanager
def traceable_vae_attention():
    from diffusers.models.autoencoders import autoencoder_kl_hunyuanvideo15 as m

    saved = m.HunyuanVideo15AttnBlock.__dict__["prepare_causal_attention_mask"]  # the staticmethod itself
    m.HunyuanVideo15AttnBlock.prepare_causal_attention_mask = staticmethod(causal_frame_mask)
    try:
        yield
    finally:
        m.HunyuanVideo15AttnBlock.prepare_causal_attention_mask = saved
