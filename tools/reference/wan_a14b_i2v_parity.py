"""Reference for the Wan 2.2 I2V-A14B parity test (tests/stages/test_wan_a14b_i2v_family.cpp):
builds the tiny random two-expert WanImageToVideoPipeline offline (two 36-channel transformers,
no image encoder, boundary_ratio), exports it as a "wan2.2-a14b-i2v" package, and runs
diffusers on the Wan 2.1 I2V reference's case and image (wan_i2v_parity.py), with and without
guidance, recording the latents after every step, the frames and each step's expert.

Usage: python -m vgen_reference.wan_a14b_i2v_parity OUT_DIR  -> prints JSON {package, reference, image, case, seed, steps, experts}."""
import pathlib
import sys

import torch

from vgen_reference.wan_a14b_parity import experts_per_step
from vgen_reference.wan_i2v_parity import CASE, emit, export_tiny, i2v_pipeline, record_runs, save_test_image


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src, manifest = export_tiny(out, "a14b-i2v")
    pipe = i2v_pipeline(src)
    image, tensors = save_test_image(out)
    record_runs(pipe, image, {"a14b_i2v": CASE["guidance_scale"], "nocfg": 1.0}, tensors)
    emit(out, tensors, experts=experts_per_step(pipe, CASE["num_inference_steps"], manifest))


if __name__ == "__main__":
    main()
