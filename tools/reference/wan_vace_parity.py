"""Reference for the C++ Wan VACE parity test (tests/stages/families/wan/test_wan_vace.cpp):
builds the tiny random WanVACEPipeline offline (tiny_wan variant "vace"), exports it
(vgen_export detects VACE by itself) and runs diffusers' own WanVACEPipeline with a control
video, a mask video and reference images, recording the latents after every step and the frames.

Runs: "cfg" (guidance 5, one reference), "nocfg" (guidance 1, the same inputs), "refs" (two
references, conditioning_scale 0.6, FlowMatchEuler) and "bare" (no control video, no mask, no
reference: diffusers' zeros video and all-ones mask).

Usage: python -m vgen_reference.wan_vace_parity OUT_DIR -> prints JSON {package, package_t2v,
reference, video, mask, references, case, seed, runs}. reference.pt holds the tensors (C++:
attr(NAME)): "video", "mask" [F,3,H,W] in [0,1], "reference_0", "reference_1" [3,h,w] in [0,1];
the same pixels as files (lossless FFV1 video.mkv / mask.mkv, PNG references), and OUT_DIR/
pkg_t2v a text-to-video package (it must refuse the VACE fields)."""
import json
import pathlib
import sys

import numpy as np
import PIL.Image
import torch

from vgen_export import wan as ew
from vgen_export.reference_loop import dump_tensors, run_wan_pipeline
from vgen_export.tiny_wan import make_scheduler, write_tiny_wan
from vgen_reference.wan_v2v_parity import test_video, write_video_file

CASE = dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
            height=32, width=48, num_inference_steps=4, guidance_scale=5.0)
FRAMES = 9
SEED = 4321
# name -> (scheduler kind or None for the package's, guidance, references used, conditioning scale, control)
RUNS = {"cfg": (None, 5.0, 1, 1.0, True), "nocfg": (None, 1.0, 1, 1.0, True),
        "refs": ("flow_euler", 5.0, 2, 0.6, True), "bare": (None, 5.0, 0, 1.0, False)}


def test_mask(frames: int, height: int, width: int) -> np.ndarray:
    """uint8 [F,H,W,3]: a white box moving right (regenerate there), black elsewhere, and grey
    levels either side of the 0.5 threshold in one band (the threshold and the packed mask's
    unthresholded values both matter)."""
    out = np.zeros((frames, height, width, 3), np.uint8)
    for f in range(frames):
        out[f, 8:24, 4 + 2 * f:20 + 2 * f] = 255
        out[f, 28:32, :16] = 120
        out[f, 28:32, 16:32] = 140
    return out


def test_reference(seed: int, height: int, width: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    return (g.random((height, width, 3)) * 255).round().astype(np.uint8)


def vace_pipeline(src: pathlib.Path):
    from diffusers import WanVACEPipeline
    from diffusers.pipelines.wan import pipeline_wan, pipeline_wan_vace

    # The VACE prompt_clean calls ftfy even when it is not installed; the same cleaning without
    # ftfy (WanPipeline's) is what vgen implements.
    pipeline_wan_vace.prompt_clean = pipeline_wan.prompt_clean
    return WanVACEPipeline.from_pretrained(src)


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_wan(out / "diffusers", seed=0, variant="vace")
    ew.export_wan(src, out / "pkg", dtype="float32", tiny=True, seed=0)
    ew.export_wan(write_tiny_wan(out / "diffusers_t2v", seed=0), out / "pkg_t2v", dtype="float32", tiny=True, seed=0)
    pipe = vace_pipeline(src)
    pixels = test_video(FRAMES, CASE["height"], CASE["width"])
    mask = test_mask(FRAMES, CASE["height"], CASE["width"])
    # Sides multiples of 8 (the image processor's resize is then a no-op), another aspect
    # ratio than the video's (scaled to 28x48 on the white canvas), and a tall one (40x16).
    refs = [test_reference(1, 24, 40), test_reference(2, 40, 16)]
    write_video_file(out / "video.mkv", pixels)
    write_video_file(out / "mask.mkv", mask)
    ref_files = []
    for i, r in enumerate(refs):
        ref_files.append(str(out / f"reference_{i}.png"))
        PIL.Image.fromarray(r).save(ref_files[-1])
    as_chw = lambda a: torch.from_numpy(a).permute(2, 0, 1).float() / 255.0  # noqa: E731
    tensors = {"video": torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255.0,
               "mask": torch.from_numpy(mask).permute(0, 3, 1, 2).float() / 255.0,
               **{f"reference_{i}": as_chw(r) for i, r in enumerate(refs)}}
    for name, (kind, guidance, nrefs, scale, control) in RUNS.items():
        case = {**CASE, "num_frames": FRAMES, "guidance_scale": guidance, "conditioning_scale": scale}
        if control:
            case["video"] = [PIL.Image.fromarray(p) for p in pixels]
            case["mask"] = [PIL.Image.fromarray(m) for m in mask]
        if nrefs:
            case["reference_images"] = [PIL.Image.fromarray(r) for r in refs[:nrefs]]
        frames, steps = run_wan_pipeline(pipe, case, SEED, make_scheduler(kind, flow_shift=3.0) if kind else None)
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    runs = {name: {"scheduler": "FlowMatchEulerDiscreteScheduler" if kind else "", "guidance": g, "references": n,
                   "conditioning_scale": s, "control": c,
                   "steps_run": sum(1 for k in tensors if k.startswith(f"latents_{name}_"))}
            for name, (kind, g, n, s, c) in RUNS.items()}
    dump_tensors(out / "ref", tensors, {"case": CASE, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "package_t2v": str(out / "pkg_t2v"),
                      "reference": str(out / "ref" / "reference.pt"), "video": str(out / "video.mkv"),
                      "mask": str(out / "mask.mkv"), "references": ref_files,
                      "case": {**CASE, "num_frames": FRAMES}, "seed": SEED, "runs": runs}))


if __name__ == "__main__":
    main()
