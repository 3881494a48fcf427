"""Reference for the C++ video-to-video parity test (tests/stages/families/wan/test_wan_v2v.cpp):
builds the tiny random Wan 2.1 T2V pipeline offline, exports it with its VAE encoder
(``export_wan(video_input=True)``), and runs diffusers' own WanVideoToVideoPipeline on one case
(a 9-frame video already at the video size) with the package's UniPC, with FlowMatchEuler,
without guidance and at strength 1, recording the latents after every step and the frames.

Usage: python -m vgen_reference.wan_v2v_parity OUT_DIR -> prints JSON {package, package_t2v,
reference, video, case, seed, runs}. reference.pt holds the tensors (C++: attr(NAME)); "video"
is the input [F,3,H,W] in [0,1]; OUT_DIR/video.mkv the same pixels (lossless FFV1, RGB), and
OUT_DIR/pkg_t2v the same model exported without the encoder (it must refuse a video)."""
import json
import pathlib
import subprocess
import sys

import numpy as np
import PIL.Image
import torch

from vgen_export import wan as ew
from vgen_export.reference_loop import dump_tensors, run_wan_pipeline
from vgen_export.tiny_wan import make_scheduler, write_tiny_wan

CASE = dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
            height=32, width=48, num_inference_steps=5, guidance_scale=5.0, strength=0.6)
FRAMES = 9
SEED = 1234
# name -> (scheduler kind or None for the package's, guidance, strength)
RUNS = {"unipc": (None, 5.0, 0.6), "euler": ("flow_euler", 5.0, 0.6), "nocfg": (None, 1.0, 0.6),
        "full": (None, 5.0, 1.0)}


def test_video(frames: int, height: int, width: int) -> np.ndarray:
    """A pattern drifting right, uint8 [F,H,W,3], the same on every run."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    out = []
    for f in range(frames):
        r = 127.5 + 127.5 * np.sin((x - 2 * f) / 5.0)
        g = 127.5 + 127.5 * np.cos(y / 4.0 + f / 3.0)
        b = np.where(x - 2 * f + y > (height + width) / 2, 230.0, 20.0)
        out.append(np.stack([r, g, b], -1).round().clip(0, 255).astype(np.uint8))
    return np.stack(out)


def write_video_file(path: pathlib.Path, pixels: np.ndarray) -> None:
    """Lossless (FFV1 in Matroska, gbrp: RGB planes), so the decoded frames are these pixels."""
    f, h, w, _ = pixels.shape
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
                    "-r", "16", "-i", "-", "-c:v", "ffv1", "-pix_fmt", "gbrp", str(path)],
                   input=pixels.tobytes(), check=True)


def v2v_pipeline(src: pathlib.Path):
    from diffusers import WanVideoToVideoPipeline
    from diffusers.pipelines.wan import pipeline_wan, pipeline_wan_video2video

    # As for I2V: the V2V prompt_clean calls ftfy even when it is not installed; the same
    # cleaning without ftfy (WanPipeline's) is what vgen implements.
    pipeline_wan_video2video.prompt_clean = pipeline_wan.prompt_clean
    return WanVideoToVideoPipeline.from_pretrained(src)


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_wan(out / "diffusers", seed=0)
    ew.export_wan(src, out / "pkg", dtype="float32", tiny=True, seed=0, video_input=True)
    ew.export_wan(src, out / "pkg_t2v", dtype="float32", tiny=True, seed=0)
    pipe = v2v_pipeline(src)
    pixels = test_video(FRAMES, CASE["height"], CASE["width"])
    write_video_file(out / "video.mkv", pixels)
    video = [PIL.Image.fromarray(p) for p in pixels]
    tensors = {"video": torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255.0}
    for name, (kind, guidance, strength) in RUNS.items():
        case = {**CASE, "video": video, "guidance_scale": guidance, "strength": strength}
        frames, steps = run_wan_pipeline(pipe, case, SEED, make_scheduler(kind, flow_shift=3.0) if kind else None)
        tensors[f"frames_{name}"] = frames
        for i, latents in enumerate(steps):
            tensors[f"latents_{name}_{i:03d}"] = latents
    runs = {name: {"scheduler": "FlowMatchEulerDiscreteScheduler" if kind else "", "guidance": g, "strength": s,
                   "steps_run": sum(1 for k in tensors if k.startswith(f"latents_{name}_"))}
            for name, (kind, g, s) in RUNS.items()}
    dump_tensors(out / "ref", tensors, {"case": {k: v for k, v in CASE.items()}, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "package_t2v": str(out / "pkg_t2v"),
                      "reference": str(out / "ref" / "reference.pt"), "video": str(out / "video.mkv"),
                      "case": {**CASE, "num_frames": FRAMES}, "seed": SEED, "runs": runs}))


if __name__ == "__main__":
    main()
