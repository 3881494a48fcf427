"""Reference for the C++ parity test (tests/stages/test_wan_family.cpp): builds the tiny
random Wan pipeline offline, exports it as a vgen package (float32 and bfloat16), and runs
diffusers' own WanPipeline on one case with UniPC (the package's scheduler), with
FlowMatchEuler, and in bfloat16,
recording the prompt embeddings, the latents after every step and the output frames.

Usage: python -m vgen_reference.wan_parity OUT_DIR  -> prints JSON {package, reference, case, steps}.
reference.pt is a TorchScript module whose buffers are the tensors (C++: attr(NAME))."""
import json
import pathlib
import sys

import torch

from vgen_export import wan as ew
from vgen_export.reference_loop import dump_tensors, run_wan_pipeline
from vgen_export.tiny_wan import make_scheduler, write_tiny_wan

CASE = dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
            height=32, width=48, num_frames=9, num_inference_steps=4, guidance_scale=5.0)
SEED = 1234


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_wan(out / "diffusers", seed=0)
    ew.export_wan(src, out / "pkg", dtype="float32", tiny=True, seed=0)
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(src)
    tensors = {}
    with torch.no_grad():
        cond, uncond = pipe.encode_prompt(CASE["prompt"], CASE["negative_prompt"], do_classifier_free_guidance=True,
                                          max_sequence_length=ew.pipeline_max_sequence_length())
    tensors["embeds_cond"], tensors["embeds_uncond"] = cond, uncond
    for name, kind in (("unipc", "unipc"), ("euler", "flow_euler")):
        frames, steps = run_wan_pipeline(pipe, CASE, SEED, make_scheduler(kind, flow_shift=3.0))
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    # A bfloat16 package against the bfloat16 pipeline (float32 VAE, as in diffusers' Wan example).
    from diffusers import AutoencoderKLWan

    ew.export_wan(src, out / "pkg_bf16", dtype="bfloat16", tiny=True, seed=0)
    vae = AutoencoderKLWan.from_pretrained(src, subfolder="vae", dtype=torch.float32)
    pipe_bf16 = WanPipeline.from_pretrained(src, vae=vae, dtype=torch.bfloat16)
    frames, steps = run_wan_pipeline(pipe_bf16, CASE, SEED, make_scheduler("unipc", flow_shift=3.0))
    tensors["frames_bf16"] = frames.float()
    for i, latents in enumerate(steps):
        tensors[f"latents_bf16_{i:03d}"] = latents.float()
    dump_tensors(out / "ref", tensors, {"case": CASE, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "package_bf16": str(out / "pkg_bf16"),
                      "reference": str(out / "ref" / "reference.pt"),
                      "case": CASE, "seed": SEED, "steps": CASE["num_inference_steps"]}))


if __name__ == "__main__":
    main()
