"""The image-to-video half of the HunyuanVideo 1.5 export: vgen_export.hunyuan15 calls it when the
checkpoint's model_index.json names HunyuanVideo15ImageToVideoPipeline (the pipeline class is the
checkpoint's own statement, and only it has image_encoder and feature_extractor, so no flag is
needed). Besides the transformer's image inputs (hunyuan15_modules.I2VTransformerExport), the
package gets:

  image_encoder.pt  (image float32 [B,3,H,W] in [0,1], the video's first frame at the job's size)
  -> [B,N,Di]: SiglipImageProcessor's fixed-size bicubic resize (skipped when the picture is
  already that size, then exact; PIL's uint8 resize otherwise differs slightly), its
  normalisation, then SiglipVisionModel's last_hidden_state;
  vae_encoder.pt    (image [B,3,H,W] in [-1,1]) -> [B,C,1,H/16,W/16]: the posterior's mode
  (retrieve_latents(sample_mode="argmax")), not yet multiplied by the scaling factor.
  The manifest says inputs.image "required": the pipeline cannot run without a picture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .common import load_saved, max_diff, save_module, trace_quietly
from .hunyuan15_modules import ExportRefused, traceable_vae_attention


class ImageEncoderExport(torch.nn.Module):
    """Scripted: SiglipImageProcessor's fixed-size resize and normalisation on a [0,1] tensor,
    then the traced vision model (last_hidden_state)."""

    def __init__(self, vision: torch.nn.Module, size_h: int, size_w: int, mean, std, mode: str):
        super().__init__()
        self.vision, self.size_h, self.size_w, self.mode = vision, size_h, size_w, mode
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.float()
        if x.size(2) != self.size_h or x.size(3) != self.size_w:
            x = torch.nn.functional.interpolate(x, size=[self.size_h, self.size_w], mode=self.mode, align_corners=False,
                                                antialias=True).clamp(0.0, 1.0)
        return self.vision((x - self.mean) / self.std)


class SiglipHidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).last_hidden_state


class VaeEncoderExport(torch.nn.Module):
    """The first frame [B,3,H,W] in [-1,1] -> the posterior's mode [B,C,1,H/16,W/16]."""

    def __init__(self, vae):
        super().__init__()
        self.encoder, self.channels = vae.encoder, int(vae.config.latent_channels)

    def forward(self, image):
        return self.encoder(image.unsqueeze(2))[:, :self.channels]


def export_image_encoder(model, processor, path: Path, gen) -> dict[str, Any]:
    """SigLIP behind SiglipImageProcessor's fixed-size resize; checked against the processor and
    the model on PIL images (exact at the processor's size, PIL vs torch resize otherwise)."""
    import PIL.Image

    size = processor.size
    modes = {2: "bilinear", 3: "bicubic"}
    if not processor.do_resize or "height" not in size or "width" not in size or int(processor.resample) not in modes \
            or not processor.do_rescale or abs(processor.rescale_factor - 1 / 255) > 1e-12 or not processor.do_normalize:
        raise ExportRefused(f"feature_extractor: only a fixed-size bilinear/bicubic resize, 1/255 rescale and a "
                            f"normalisation are exported (size={size}, resample={processor.resample})")
    sh, sw = int(size["height"]), int(size["width"])
    vision = SiglipHidden(model).eval()
    traced = trace_quietly(vision, (torch.randn(1, 3, sh, sw, generator=gen),))
    driver = ImageEncoderExport(traced, sh, sw, processor.image_mean, processor.image_std, modes[int(processor.resample)])
    saved = save_module(torch.jit.script(driver), path)
    loaded = load_saved(path)
    checks = []
    # Random pixels are the resize's worst case: PIL (uint8) and torch (float) differ up to ~0.05 here.
    for h, w, tol in ((sh, sw, 1e-5), (2 * sh, 3 * sw, 1e-1)):
        pixels = (torch.rand(h, w, 3, generator=gen) * 255).to(torch.uint8)
        ref_in = processor(images=PIL.Image.fromarray(pixels.numpy()), return_tensors="pt")["pixel_values"]
        ref = vision(ref_in.to(next(model.parameters()).dtype))
        got = loaded(pixels.permute(2, 0, 1).unsqueeze(0).float() / 255.0)
        checks.append({"shape": [1, 3, h, w], "max_abs_diff": max_diff(got, ref), "tolerance": tol})
    return {"trace_shape": [1, 3, sh, sw], **saved, "checks": checks, "size": [sh, sw], "tokens": int(ref.shape[1]),
            "dim": int(ref.shape[2])}


def trace_vae_encoder(vae, path: Path, gen) -> tuple[dict[str, Any], list, list[int]]:
    """Writes vae_encoder.pt; returns what hunyuan15.export_vae checks it with once the eager VAE
    is gone: (the saved file's entry, [(x, vae.encode(...).latent_dist.mode())] on [B,3,1,H,W],
    the trace shape)."""
    wrapper = VaeEncoderExport(vae).eval()
    with traceable_vae_attention():
        traced = trace_quietly(wrapper, (torch.rand(1, 3, 32, 48, generator=gen) * 2 - 1,))
    refs = []
    for b, h, w in ((1, 16, 16), (2, 32, 48), (1, 48, 32)):
        x = torch.rand(b, 3, h, w, generator=gen) * 2 - 1
        refs.append((x, torch.cat([vae.encode(row.unsqueeze(2)).latent_dist.mode() for row in x.split(1)])))
    return save_module(traced, path), refs, [1, 3, 32, 48]


def export_siglip(src: Path, out_dir: Path, dtype, gen) -> dict[str, Any]:
    """image_encoder.pt from the checkpoint's image_encoder and feature_extractor."""
    from transformers import SiglipImageProcessor, SiglipVisionModel

    processor = SiglipImageProcessor.from_pretrained(src / "feature_extractor")
    vision = SiglipVisionModel.from_pretrained(src / "image_encoder", torch_dtype=dtype).eval()
    return export_image_encoder(vision, processor, out_dir / "image_encoder.pt", gen)


def check_image_width(checks: dict[str, Any], tcfg: dict[str, Any]) -> None:
    if checks["image_encoder"]["dim"] != int(tcfg["image_embed_dim"]):
        raise ExportRefused(f"image_encoder width {checks['image_encoder']['dim']} != transformer image_embed_dim "
                            f"{tcfg['image_embed_dim']}")
