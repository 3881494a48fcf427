"""Reference for the first-last-frame parity test (tests/stages/test_wan_i2v_family.cpp): builds the
tiny random Wan 2.1 FLF2V pipeline offline (the I2V transformer with pos_embed_seq_len), exports
it, and runs diffusers' WanImageToVideoPipeline with `image` and `last_image` (both already at
the video size), recording the image tokens, the latents after every step and the frames.

Usage: python -m vgen_reference.wan_flf2v_parity OUT_DIR  -> prints JSON {package, reference, image, last_image, case, seed, steps}."""
import json
import pathlib
import sys

import PIL.Image
import torch

from vgen_export import wan as ew
from vgen_export.reference_loop import dump_tensors, run_wan_pipeline
from vgen_export.tiny_wan import write_tiny_wan

from vgen_reference.wan_i2v_parity import CASE, SEED, test_image


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_wan(out / "diffusers", seed=0, variant="flf2v")
    ew.export_wan(src, out / "pkg", dtype="float32", tiny=True, seed=0)
    from diffusers import WanImageToVideoPipeline
    from diffusers.pipelines.wan import pipeline_wan, pipeline_wan_i2v

    pipeline_wan_i2v.prompt_clean = pipeline_wan.prompt_clean  # diffusers 0.42.1 calls ftfy unguarded

    first = test_image(CASE["height"], CASE["width"])
    last = first[::-1, ::-1].copy()  # another picture: the first one rotated by 180 degrees
    images = [PIL.Image.fromarray(first), PIL.Image.fromarray(last)]
    images[0].save(out / "image.png")
    images[1].save(out / "last_image.png")
    pipe = WanImageToVideoPipeline.from_pretrained(src)
    tensors = {}
    with torch.no_grad():
        tokens = pipe.encode_image(images, torch.device("cpu"))  # [2, N, D]
        tensors["image_embeds"] = tokens.reshape(1, -1, tokens.shape[2])
    for name, g in (("flf2v", CASE["guidance_scale"]), ("nocfg", 1.0)):
        frames, steps = run_wan_pipeline(pipe, {**CASE, "guidance_scale": g, "image": images[0],
                                                "last_image": images[1]}, SEED)
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    dump_tensors(out / "ref", tensors, {"case": CASE, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"),
                      "image": str(out / "image.png"), "last_image": str(out / "last_image.png"), "case": CASE,
                      "seed": SEED, "steps": CASE["num_inference_steps"]}))


if __name__ == "__main__":
    main()
