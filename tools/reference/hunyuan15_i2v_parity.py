"""Reference for the C++ image-to-video parity test (tests/stages/families/hunyuan15/
test_hunyuan15_i2v.cpp): builds the tiny random HunyuanVideo 1.5 image-to-video pipeline offline,
exports it as a vgen package, and runs diffusers' own HunyuanVideo15ImageToVideoPipeline on two
cases (guidance with a quoted glyph text, no guidance), recording the latents after every
scheduler step and the frames.

The pipeline picks the video's size from the picture (transformer target_size buckets): a
square picture at the tiny target size 32 gives a 32x32 video, which is also the tiny SigLIP's
input size, so neither the video processor nor the image processor resizes (vgen's fit and the
image encoder's resize are then exact). The cases' height and width say that size for vgen.

Usage: python -m vgen_reference.hunyuan15_i2v_parity OUT_DIR
  -> prints JSON {package, reference, image, cases, seed}; OUT_DIR/image.png is the picture."""
import json
import pathlib
import sys

import PIL.Image
import torch

from vgen_export import hunyuan15 as eh
from vgen_export.reference_loop import dump_tensors
from vgen_export.tiny_hunyuan15 import IMAGE_SIZE, write_tiny_hunyuan15
from vgen_reference.hunyuan15_parity import run_hunyuan15_pipeline
from vgen_reference.wan_i2v_parity import test_image  # the picture the Wan I2V reference uses

CASES = {
    "i2v": dict(prompt='a neon sign that says "OPEN" flickers', negative_prompt="blurry, low quality",
                height=IMAGE_SIZE, width=IMAGE_SIZE, num_frames=9, num_inference_steps=3, guidance_scale=6.0),
    "nocfg": dict(prompt="a red square slides right", negative_prompt="", height=IMAGE_SIZE, width=IMAGE_SIZE,
                  num_frames=5, num_inference_steps=2, guidance_scale=1.0),
}
SEED = 1234


def run_i2v_pipeline(pipe, case, image, seed):
    """HunyuanVideo15ImageToVideoPipeline on ``case`` (it takes no height or width: the picture's
    bucket decides, checked here to be the case's size): frames [1,F,3,H,W] and every step's latents."""
    size = pipe.video_processor.calculate_default_height_width(image.height, image.width, pipe.target_size)
    if tuple(size) != (case["height"], case["width"]):
        raise RuntimeError(f"the pipeline would render {size}, the case says {case['height']}x{case['width']}")
    args = {k: v for k, v in case.items() if k not in ("height", "width")}
    return run_hunyuan15_pipeline(pipe, {**args, "image": image}, seed)


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_hunyuan15(out / "diffusers", seed=0, variant="i2v")
    eh.export_hunyuan15(src, out / "pkg", dtype="float32", tiny=True, seed=0)
    from diffusers import HunyuanVideo15ImageToVideoPipeline

    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(src)
    pipe.set_progress_bar_config(disable=True)
    image = PIL.Image.fromarray(test_image(IMAGE_SIZE, IMAGE_SIZE))
    image.save(out / "image.png")
    tensors = {}
    for name, case in CASES.items():
        with torch.no_grad():
            frames, steps = run_i2v_pipeline(pipe, case, image, SEED)
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    dump_tensors(out / "ref", tensors, {"cases": CASES, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"),
                      "image": str(out / "image.png"), "cases": CASES, "seed": SEED}))


if __name__ == "__main__":
    main()
