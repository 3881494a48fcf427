"""Reference for the C++ parity test (tests/stages/families/hunyuan15/test_hunyuan15_family.cpp):
builds the tiny random HunyuanVideo 1.5 pipeline offline, exports it as a vgen package, and runs
diffusers' own HunyuanVideo15Pipeline on three cases (guidance with a quoted glyph text, guidance
without one, no guidance), recording the latents after every scheduler step and the frames; and
the ids HF's tokenizer gives the chat-templated prompts (the C++ tokenizer test reads them).

Usage: python -m vgen_reference.hunyuan15_parity OUT_DIR -> prints JSON {package, reference, cases, seed}.
reference.pt is a TorchScript module whose buffers are the tensors (C++: attr(NAME))."""
import json
import pathlib
import sys

import torch

from vgen_export import hunyuan15 as eh
from vgen_export.reference_loop import dump_tensors
from vgen_export.tiny_hunyuan15 import write_tiny_hunyuan15

CASES = {
    "cfg": dict(prompt='a neon sign that says "OPEN" over a wet street', negative_prompt="blurry, low quality",
                height=32, width=48, num_frames=9, num_inference_steps=3, guidance_scale=6.0),
    "cfg_plain": dict(prompt="a red fox runs through snow", negative_prompt="", height=48, width=32, num_frames=5,
                      num_inference_steps=2, guidance_scale=4.5),
    "nocfg": dict(prompt="a blue square", negative_prompt="", height=32, width=32, num_frames=5,
                  num_inference_steps=2, guidance_scale=1.0),
}
SEED = 1234


def run_hunyuan15_pipeline(pipe, case, seed):
    """diffusers' HunyuanVideo15Pipeline on ``case``: frames [1,F,3,H,W] and every step's latents
    (the pipeline has no step callback: the scheduler's step is observed)."""
    steps = []
    step = pipe.scheduler.step

    def record(*args, **kwargs):
        out = step(*args, **kwargs)
        steps.append(out[0].clone())
        return out

    pipe.scheduler.step = record
    pipe.guider.guidance_scale = case["guidance_scale"]  # the guider carries the scale, not the call
    args = {k: v for k, v in case.items() if k != "guidance_scale"}
    try:
        frames = pipe(**args, generator=torch.Generator().manual_seed(seed), output_type="pt").frames
    finally:
        del pipe.scheduler.step
    return frames, steps


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_hunyuan15(out / "diffusers", seed=0)
    eh.export_hunyuan15(src, out / "pkg", dtype="float32", tiny=True, seed=0)
    from diffusers import HunyuanVideo15Pipeline

    pipe = HunyuanVideo15Pipeline.from_pretrained(src)
    pipe.set_progress_bar_config(disable=True)
    tensors = {}
    for name, case in CASES.items():
        with torch.no_grad():
            frames, steps = run_hunyuan15_pipeline(pipe, case, SEED)
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    dump_tensors(out / "ref", tensors, {"cases": CASES, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"), "cases": CASES,
                      "seed": SEED}))


if __name__ == "__main__":
    main()
