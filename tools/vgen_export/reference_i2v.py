"""The reference Wan 2.1 image-to-video loop over an exported package (Python, LibTorch ops):
step for step what the C++ family (stages/wan/wan_i2v_family.cpp) does, and what
diffusers.WanImageToVideoPipeline does (tests/python/test_export_wan_variants.py):

1. text as for text-to-video (reference_loop.encode_prompts), the context at all 512 rows;
2. ``image_encoder.pt`` on the image [1,3,H,W] in [0,1] -> image tokens [1,N,D];
3. ``vae_encoder.pt`` on [2*image-1, zeros x (F-1)] -> mean, normalised (m - mean) / std;
4. the mask [1,4,F',H',W']: 1 on latent frame 0 (its 4 sub-frames), 0 after;
5. each step: ``transformer.pt`` on cat([latents, mask, condition], 1) with the image tokens
   (the same for cond and uncond rows), CFG, scheduler step; decode as text-to-video.

Wan 2.2 I2V-A14B (``image_conditioning.image_encoder`` false, manifest ``experts``): no step 2
and no image tokens; step 5 calls ``transformer.pt`` while t >= boundary_ratio * training
steps and ``transformer_2.pt`` below, each on the text context alone.
"""

from __future__ import annotations

from typing import Any

import torch

from .common import load_saved
from .reference_loop import encode_prompts, initial_noise, load_package, unnormalise


def condition_latents(pkg, image: torch.Tensor, frames: int) -> torch.Tensor:
    """image [3,H,W] in [0,1] -> [1, 4 + C, F', H', W'] (mask, then normalised condition)."""
    enc = load_saved(pkg.root / pkg.manifest["components"]["vae_encoder"]["file"])
    lat = pkg.manifest["latent"]
    c, t = lat["channels"], lat["temporal_scale"]
    video = torch.zeros(1, 3, frames, image.shape[1], image.shape[2])
    video[:, :, 0] = image * 2 - 1
    mean = torch.tensor(lat["latents_mean"], dtype=torch.float32).view(1, c, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(lat["latents_std"], dtype=torch.float32).view(1, c, 1, 1, 1)
    cond = (enc(video) - mean) * inv_std
    mask = torch.zeros(1, t, cond.shape[2], cond.shape[3], cond.shape[4])
    mask[:, :, 0] = 1
    return torch.cat([mask, cond], 1)


def run_i2v_reference(pkg, image: torch.Tensor, prompt: str, negative_prompt: str, height: int, width: int,
                      num_frames: int, num_inference_steps: int, guidance_scale: float, seed: int) -> dict[str, Any]:
    if not hasattr(pkg, "manifest"):
        pkg = load_package(pkg)
    man = pkg.manifest
    cfg = guidance_scale > 1.0
    embeds = encode_prompts(pkg, [prompt] + ([negative_prompt] if cfg else []))["prompt_embeds"].to(pkg.dtype)
    load = lambda name: load_saved(pkg.root / man["components"][name]["file"])  # noqa: E731
    tokens = man["image_conditioning"].get("image_encoder", True)
    experts = man.get("experts")
    rec: dict[str, Any] = {}
    with torch.no_grad():
        image_embeds = load("image_encoder")(image.unsqueeze(0)).to(pkg.dtype) if tokens else None
        condition = condition_latents(pkg, image, num_frames)
        low = load(experts["low_noise"]) if experts else None
        rec["image_embeds"], rec["condition"] = image_embeds, condition
        scheduler = pkg.make_scheduler()
        scheduler.set_timesteps(num_inference_steps)
        latents = initial_noise(man, height, width, num_frames, seed)
        boundary = experts["boundary_ratio"] * scheduler.config.num_train_timesteps if experts else None
        for i, t in enumerate(scheduler.timesteps):
            x = torch.cat([latents, condition], 1).to(pkg.dtype)
            n = 2 if cfg else 1
            model = low if boundary is not None and float(t) < boundary else pkg.transformer
            args = (x.repeat(n, 1, 1, 1, 1), t.float().expand(n).contiguous(), embeds)
            pred = model(*args, image_embeds.repeat(n, 1, 1)) if tokens else model(*args)
            if cfg:
                cond, uncond = pred.chunk(2)
                pred = uncond + guidance_scale * (cond - uncond)
            latents = scheduler.step(pred, t, latents, return_dict=False)[0]
            rec[f"latents_{i:03d}"] = latents.clone()
        video = pkg.vae_decoder(unnormalise(man, latents))
    rec["frames"] = (video / 2 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4).contiguous()
    return rec
