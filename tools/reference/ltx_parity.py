"""Reference for the C++ parity test (tests/stages/test_ltx_family.cpp): builds the tiny random
LTX-Video pipeline offline, exports it as a vgen package (decode_timestep 0.05, noise scale
0.025, as LTX-Video 0.9.1 is run), and runs diffusers' own LTXPipeline on two cases (with and
without guidance), recording the latents after every step (unpacked to [1,C,F,H,W]) and the
output frames; then LTXImageToVideoPipeline on the same package's components with a first frame
(OUT_DIR/image.png, at the video size) on the I2V_CASES.

Usage: python -m vgen_reference.ltx_parity OUT_DIR  -> prints JSON {package, reference, cases, i2v_cases, image, seed}.
reference.pt is a TorchScript module whose buffers are the tensors (C++: attr(NAME))."""
import json
import pathlib
import sys

import torch

from vgen_export import ltx as el
from vgen_export.reference_loop import dump_tensors
from vgen_export.tiny_ltx import write_tiny_ltx

DECODE = dict(decode_timestep=0.05, decode_noise_scale=0.025)
CASES = {
    "cfg": dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
                height=64, width=96, num_frames=17, num_inference_steps=4, guidance_scale=3.0, frame_rate=24),
    "nocfg": dict(prompt="a blue square", negative_prompt="", height=32, width=64, num_frames=9,
                  num_inference_steps=3, guidance_scale=1.0, frame_rate=30),
}
# Image-to-video: the first frame given (the cases' names are the tensors' names).
I2V_CASES = {"i2v": CASES["cfg"], "i2v_nocfg": {**CASES["cfg"], "guidance_scale": 1.0, "frame_rate": 30}}
SEED = 1234


def run_ltx_pipeline(pipe, case, seed):
    """diffusers' LTXPipeline on ``case``: frames [1,F,3,H,W] and every step's latents, unpacked."""
    steps = []
    f = (case["num_frames"] - 1) // pipe.vae_temporal_compression_ratio + 1
    h, w = case["height"] // pipe.vae_spatial_compression_ratio, case["width"] // pipe.vae_spatial_compression_ratio

    def record(_pipe, _i, _t, kwargs):
        steps.append(pipe._unpack_latents(kwargs["latents"], f, h, w).clone())  # noqa: SLF001
        return {}

    frames = pipe(**case, **DECODE, generator=torch.Generator().manual_seed(seed), output_type="pt",
                  callback_on_step_end=record).frames
    return frames, steps


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_ltx(out / "diffusers", seed=0)
    el.export_ltx(src, out / "pkg", dtype="float32", tiny=True, seed=0, **DECODE)
    from diffusers import LTXPipeline

    pipe = LTXPipeline.from_pretrained(src)
    pipe.set_progress_bar_config(disable=True)
    tensors = {}
    for name, case in CASES.items():
        with torch.no_grad():
            frames, steps = run_ltx_pipeline(pipe, case, SEED)
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    import PIL.Image
    from diffusers import LTXImageToVideoPipeline

    from vgen_reference.wan_i2v_parity import test_image

    c = I2V_CASES["i2v"]
    pixels = test_image(c["height"], c["width"])
    PIL.Image.fromarray(pixels).save(out / "image.png")
    tensors["image"] = torch.from_numpy(pixels).permute(2, 0, 1).float() / 255.0
    i2v = LTXImageToVideoPipeline.from_pipe(pipe)
    i2v.set_progress_bar_config(disable=True)
    for name, case in I2V_CASES.items():
        with torch.no_grad():
            frames, steps = run_ltx_pipeline(i2v, {**case, "image": PIL.Image.fromarray(pixels)}, SEED)
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    dump_tensors(out / "ref", tensors, {"cases": CASES, "i2v_cases": I2V_CASES, "seed": SEED, **DECODE})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"),
                      "cases": CASES, "i2v_cases": I2V_CASES, "image": str(out / "image.png"), "seed": SEED}))


if __name__ == "__main__":
    main()
