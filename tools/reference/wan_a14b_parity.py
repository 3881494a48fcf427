"""Reference for the two-expert (Wan 2.2 A14B) case of tests/stages/test_wan_family.cpp: builds
the tiny random two-expert WanPipeline (transformer above boundary_ratio * 1000, transformer_2
below) offline, exports it, and runs diffusers' WanPipeline on one case, recording the latents
after every step, the frames and which expert each step used.

Usage: python -m vgen_reference.wan_a14b_parity OUT_DIR  -> prints JSON {package, reference, case, seed, steps, experts}."""
import json
import pathlib
import sys

import torch

from vgen_export import wan as ew
from vgen_export.reference_loop import dump_tensors, run_wan_pipeline
from vgen_export.tiny_wan import write_tiny_wan

CASE = dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
            height=32, width=48, num_frames=9, num_inference_steps=6, guidance_scale=5.0)
SEED = 1234


def experts_per_step(pipe, steps: int, manifest: dict) -> list[str]:
    """Which expert diffusers uses at each of `steps` steps (transformer at t >= the boundary)."""
    pipe.scheduler.set_timesteps(steps)
    boundary = manifest["experts"]["boundary_ratio"] * pipe.scheduler.config.num_train_timesteps
    return ["transformer" if float(t) >= boundary else "transformer_2" for t in pipe.scheduler.timesteps]


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_wan(out / "diffusers", seed=0, variant="a14b-t2v")
    manifest = ew.export_wan(src, out / "pkg", dtype="float32", tiny=True, seed=0)
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(src)
    frames, steps = run_wan_pipeline(pipe, CASE, SEED)
    tensors = {"frames_a14b": frames, **{f"latents_a14b_{i:03d}": x for i, x in enumerate(steps)}}
    experts = experts_per_step(pipe, CASE["num_inference_steps"], manifest)
    dump_tensors(out / "ref", tensors, {"case": CASE, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"), "case": CASE,
                      "seed": SEED, "steps": CASE["num_inference_steps"], "experts": experts}))


if __name__ == "__main__":
    main()
