"""Reference for the C++ image-to-video parity test (tests/stages/test_wan_i2v_family.cpp): builds
the tiny random Wan 2.1 I2V pipeline offline, exports it as a vgen package, and runs diffusers'
own WanImageToVideoPipeline on one case (an image already at the video size), recording the
image embeddings, the latents after every step and the output frames.

Usage: python -m vgen_reference.wan_i2v_parity OUT_DIR  -> prints JSON {package, reference, image, case, seed, steps}.
reference.pt holds the tensors (C++: attr(NAME)); "image" is the input [3,H,W] in [0,1] and
OUT_DIR/image.png the same pixels."""
import json
import pathlib
import sys

import numpy as np
import PIL.Image
import torch

from vgen_export import wan as ew
from vgen_export.reference_loop import dump_tensors, run_wan_pipeline
from vgen_export.tiny_wan import write_tiny_wan

CASE = dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
            height=32, width=48, num_frames=9, num_inference_steps=4, guidance_scale=5.0)
SEED = 1234


def test_image(height: int, width: int) -> np.ndarray:
    """A smooth colour pattern with an edge (uint8 [H,W,3]), the same on every run."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 127.5 + 127.5 * np.sin(x / 5.0)
    g = 127.5 + 127.5 * np.cos(y / 4.0)
    b = np.where(x + y > (height + width) / 2, 230.0, 20.0)
    return np.stack([r, g, b], -1).round().clip(0, 255).astype(np.uint8)


def export_tiny(out: pathlib.Path, variant: str) -> tuple[pathlib.Path, dict]:
    """The tiny random diffusers directory of `variant` and its vgen package (OUT/pkg)."""
    src = write_tiny_wan(out / "diffusers", seed=0, variant=variant)
    return src, ew.export_wan(src, out / "pkg", dtype="float32", tiny=True, seed=0)


def i2v_pipeline(src: pathlib.Path):
    from diffusers import WanImageToVideoPipeline
    from diffusers.pipelines.wan import pipeline_wan, pipeline_wan_i2v

    # diffusers 0.42.1's I2V prompt_clean calls ftfy even when it is not installed (NameError);
    # WanPipeline's checks first. The same cleaning without ftfy is what vgen implements.
    pipeline_wan_i2v.prompt_clean = pipeline_wan.prompt_clean
    return WanImageToVideoPipeline.from_pretrained(src)


def save_test_image(out: pathlib.Path):
    """OUT/image.png (the case's size) and its tensors entry "image" [3,H,W] in [0,1]."""
    pixels = test_image(CASE["height"], CASE["width"])
    image = PIL.Image.fromarray(pixels)
    image.save(out / "image.png")
    return image, {"image": torch.from_numpy(pixels).permute(2, 0, 1).float() / 255.0}


def record_runs(pipe, image, runs: dict[str, float], tensors: dict) -> dict:
    """For each run name -> guidance: frames_NAME and latents_NAME_iii (after every step)."""
    for name, guidance in runs.items():
        frames, steps = run_wan_pipeline(pipe, {**CASE, "image": image, "guidance_scale": guidance}, SEED)
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    return tensors


def emit(out: pathlib.Path, tensors: dict, **info) -> None:
    """OUT/ref/reference.pt and the JSON line the C++ test reads."""
    dump_tensors(out / "ref", tensors, {"case": CASE, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"),
                      "image": str(out / "image.png"), "case": CASE, "seed": SEED,
                      "steps": CASE["num_inference_steps"], **info}))


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src, _ = export_tiny(out, "i2v")
    pipe = i2v_pipeline(src)
    image, tensors = save_test_image(out)
    with torch.no_grad():
        tensors["image_embeds"] = pipe.encode_image(image, torch.device("cpu"))
    # Without guidance (one row per job): the unconditional branch skipped.
    emit(out, record_runs(pipe, image, {"i2v": CASE["guidance_scale"], "nocfg": 1.0}, tensors))


if __name__ == "__main__":
    main()
