"""Reference for the C++ SkyReels-V2 diffusion-forcing parity test
(tests/stages/families/skyreels/test_skyreels_df_family.cpp): builds the tiny random SkyReels-V2
DF pipeline offline, exports it (``vgen_export.skyreels``), and runs diffusers' own
SkyReelsV2DiffusionForcingPipeline (text-to-video) and SkyReelsV2DiffusionForcingVideoToVideoPipeline
(extension of a 13-frame video, overlap_history 5) synchronously (ar_step 0, the pipelines'
default), recording the latents after every step and the frames.

Usage: python -m vgen_reference.skyreels_df_parity OUT_DIR -> prints JSON {package, reference,
video, case, seed, runs}. reference.pt holds the tensors (C++: attr(NAME)): latents_<run>_<i>,
frames_<run> ([1,F,3,H,W] in [0,1]; for "extend" only the generated segment, diffusers' output
after the input's frames, which it returns first) and "video", the input [F,3,H,W] in [0,1];
OUT_DIR/video.mkv holds the same pixels (lossless)."""
import json
import pathlib
import sys

import PIL.Image
import torch

from vgen_export import skyreels as es
from vgen_export.reference_loop import dump_tensors
from vgen_export.tiny_skyreels import write_tiny_skyreels
from vgen_reference.wan_v2v_parity import test_video, write_video_file

CASE = dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
            height=32, width=48, num_inference_steps=5)
FRAMES = 9          # every run's new segment (diffusers' num_frames; for extension including the overlap)
VIDEO_FRAMES = 13   # the clip extension continues
OVERLAP = 5         # overlap_history: the clip's last 5 frames (2 latent frames) condition the segment
SEED = 1234
# name -> (pipeline, guidance, fps)
RUNS = {"t2v": ("t2v", 5.0, 24), "nocfg": ("t2v", 1.0, 16), "extend": ("v2v", 5.0, 24)}


def pipelines(src: pathlib.Path):
    from diffusers import SkyReelsV2DiffusionForcingPipeline, SkyReelsV2DiffusionForcingVideoToVideoPipeline
    from diffusers.pipelines.skyreels_v2 import (pipeline_skyreels_v2_diffusion_forcing as df,
                                                 pipeline_skyreels_v2_diffusion_forcing_v2v as df_v2v)
    from diffusers.pipelines.wan import pipeline_wan

    # The same cleaning without ftfy (WanPipeline's) is what vgen implements.
    df.prompt_clean = pipeline_wan.prompt_clean
    df_v2v.prompt_clean = pipeline_wan.prompt_clean
    t2v = SkyReelsV2DiffusionForcingPipeline.from_pretrained(src)
    v2v = SkyReelsV2DiffusionForcingVideoToVideoPipeline(**t2v.components)
    for p in (t2v, v2v):
        p.set_progress_bar_config(disable=True)
    return t2v, v2v


def run(pipe, case, seed):
    steps = []

    def record(_pipe, _i, _t, kwargs):
        steps.append(kwargs["latents"].clone())
        return {}

    frames = pipe(**case, generator=torch.Generator().manual_seed(seed), output_type="pt",
                  callback_on_step_end=record).frames
    return frames, steps


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_skyreels(out / "diffusers", seed=0)
    es.export_skyreels(src, out / "pkg", dtype="float32", tiny=True, seed=0, overlap_history=OVERLAP)
    t2v, v2v = pipelines(src)
    pixels = test_video(VIDEO_FRAMES, CASE["height"], CASE["width"])
    write_video_file(out / "video.mkv", pixels)
    tensors = {"video": torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255.0}
    runs = {}
    for name, (kind, guidance, fps) in RUNS.items():
        case = {**CASE, "num_frames": FRAMES, "guidance_scale": guidance, "fps": fps, "ar_step": 0}
        if kind == "v2v":
            case.update(video=[PIL.Image.fromarray(p) for p in pixels], overlap_history=OVERLAP)
        frames, steps = run(t2v if kind == "t2v" else v2v, case, SEED)
        if kind == "v2v":  # diffusers returns the input's frames, then the decoded segment
            tensors[f"input_{name}"] = frames[:, :VIDEO_FRAMES]
            frames = frames[:, VIDEO_FRAMES:]
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
        runs[name] = {"guidance": guidance, "fps": fps, "video": kind == "v2v", "steps_run": len(steps),
                      "prefix_latent_frames": (OVERLAP - 1) // 4 + 1 if kind == "v2v" else 0}
    dump_tensors(out / "ref", tensors, {"case": CASE, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"),
                      "video": str(out / "video.mkv"), "overlap_history": OVERLAP, "video_frames": VIDEO_FRAMES,
                      "case": {**CASE, "num_frames": FRAMES}, "seed": SEED, "runs": runs}))


if __name__ == "__main__":
    main()
