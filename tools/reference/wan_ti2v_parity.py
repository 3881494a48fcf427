"""Reference for the Wan 2.2 TI2V-5B parity test (tests/stages/test_wan_ti2v_family.cpp): builds
the tiny random TI2V pipeline offline (z_dim-48 residual VAE, expand_timesteps), exports it as
a vgen package, and runs diffusers on one case twice: WanPipeline (text-to-video) and
WanImageToVideoPipeline on the same components (image-to-video, an image already at the video
size), recording the latents after every step and the output frames of each; image-to-video
also without guidance, and the image's normalised latents.

Usage: python -m vgen_reference.wan_ti2v_parity OUT_DIR  -> prints JSON {package, reference, image, case, seed, steps}."""
import json
import pathlib
import sys

import PIL.Image
import torch

from vgen_export import wan as ew
from vgen_export.reference_loop import dump_tensors, run_wan_pipeline
from vgen_export.tiny_wan import write_tiny_wan

from vgen_reference.wan_i2v_parity import test_image

CASE = dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
            height=32, width=64, num_frames=9, num_inference_steps=4, guidance_scale=5.0)
SEED = 1234


def record(tensors, name, result):
    frames, steps = result
    tensors[f"frames_{name}"] = frames
    for i, latents in enumerate(steps):
        tensors[f"latents_{name}_{i:03d}"] = latents


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_wan(out / "diffusers", seed=0, variant="ti2v")
    ew.export_wan(src, out / "pkg", dtype="float32", tiny=True, seed=0)
    from diffusers import WanImageToVideoPipeline, WanPipeline
    from diffusers.pipelines.wan import pipeline_wan, pipeline_wan_i2v

    # diffusers 0.42.1's I2V prompt_clean calls ftfy even when it is not installed (NameError);
    # WanPipeline's checks first. The same cleaning without ftfy is what vgen implements.
    pipeline_wan_i2v.prompt_clean = pipeline_wan.prompt_clean

    pixels = test_image(CASE["height"], CASE["width"])
    image = PIL.Image.fromarray(pixels)
    image.save(out / "image.png")
    t2v = WanPipeline.from_pretrained(src)
    # The same directory as diffusers' image-to-video pipeline (as Wan2.2-TI2V-5B-Diffusers is used).
    i2v = WanImageToVideoPipeline(**t2v.components, expand_timesteps=True)
    tensors = {"image": torch.from_numpy(pixels).permute(2, 0, 1).float() / 255.0}
    with torch.no_grad():
        video = i2v.video_processor.preprocess(image, height=CASE["height"], width=CASE["width"]).unsqueeze(2)
        mean = i2v.vae.encode(video).latent_dist.mode()
        cfg = i2v.vae.config
        lat_mean = torch.tensor(cfg.latents_mean).view(1, cfg.z_dim, 1, 1, 1)
        tensors["condition"] = (mean - lat_mean) * (1.0 / torch.tensor(cfg.latents_std).view(1, cfg.z_dim, 1, 1, 1))
    record(tensors, "t2v", run_wan_pipeline(t2v, CASE, SEED))
    record(tensors, "i2v", run_wan_pipeline(i2v, {**CASE, "image": image}, SEED))
    record(tensors, "nocfg", run_wan_pipeline(i2v, {**CASE, "image": image, "guidance_scale": 1.0}, SEED))
    dump_tensors(out / "ref", tensors, {"case": CASE, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"),
                      "image": str(out / "image.png"), "case": CASE, "seed": SEED,
                      "steps": CASE["num_inference_steps"]}))


if __name__ == "__main__":
    main()
