"""Reference for the C++ parity test (tests/stages/families/test_ltx2_family.cpp): builds the tiny
random LTX-2 pipeline offline, exports it as a vgen package and runs diffusers' own LTX2Pipeline
on two cases (with and without guidance), recording the video latents after every step
(unpacked to [1,C,F,H,W]), the audio latents after every step (packed [1,La,C*M], normalised:
as the pipeline holds them), the output frames [1,F,3,H,W] and the sound [1,channels,samples]; then LTX2ImageToVideoPipeline on the
same components with a first frame (OUT_DIR/image.png, at the video size, image_crf=0: vgen does
not re-compress the image) on the I2V_CASES.

The pipeline runs classifier-free guidance only (stg_scale=0, modality_scale=1,
guidance_rescale=0, one scale for video and audio), which is what the ltx2 family runs.
The video latents come from the step callback (the whole packed latents after the step); the
callback cannot see the audio latents, so the scheduler's step is wrapped: per denoising step it
is called for the video latents (image-to-video: frames 1.. only), then for the audio latents.

Usage: python -m vgen_reference.ltx2_parity OUT_DIR
  -> prints JSON {package, reference, cases, i2v_cases, image, seed}."""
import json
import pathlib
import sys

import torch

from vgen_export import ltx2 as el
from vgen_export.reference_loop import dump_tensors
from vgen_export.tiny_ltx2 import TINY_MAX_LENGTH, write_tiny_ltx2

CFG_ONLY = dict(stg_scale=0.0, modality_scale=1.0, guidance_rescale=0.0, audio_guidance_scale=None,
                audio_stg_scale=0.0, audio_modality_scale=1.0, audio_guidance_rescale=0.0,
                spatio_temporal_guidance_blocks=None, max_sequence_length=TINY_MAX_LENGTH)
CASES = {
    "cfg": dict(prompt="a dog barks at a passing car", negative_prompt="blurry, low quality",
                height=64, width=96, num_frames=17, num_inference_steps=4, guidance_scale=3.0, frame_rate=24.0),
    "nocfg": dict(prompt="a blue square", negative_prompt="", height=64, width=64, num_frames=9,
                  num_inference_steps=3, guidance_scale=1.0, frame_rate=25.0),
}
I2V_CASES = {"i2v": CASES["cfg"], "i2v_nocfg": {**CASES["cfg"], "guidance_scale": 1.0, "frame_rate": 25.0}}
SEED = 1234


def run_ltx2_pipeline(pipe, case, seed):
    """LTX2Pipeline on ``case``: frames [1,F,3,H,W], every step's video latents (unpacked) and
    audio latents (packed)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    outputs, video = [], []
    step = FlowMatchEulerDiscreteScheduler.step

    def recording_step(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        outputs.append(out[0].clone())
        return out

    f = (case["num_frames"] - 1) // pipe.vae_temporal_compression_ratio + 1
    h, w = case["height"] // pipe.vae_spatial_compression_ratio, case["width"] // pipe.vae_spatial_compression_ratio
    def record(_pipe, _i, _t, kwargs):
        video.append(pipe._unpack_latents(kwargs["latents"], f, h, w).clone())  # noqa: SLF001
        return {}

    FlowMatchEulerDiscreteScheduler.step = recording_step
    try:
        result = pipe(**case, **CFG_ONLY, generator=torch.Generator().manual_seed(seed), output_type="pt",
                      callback_on_step_end=record, callback_on_step_end_tensor_inputs=["latents"])
    finally:
        FlowMatchEulerDiscreteScheduler.step = step
    return result.frames, video, outputs[1::2], result.audio


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_ltx2(out / "diffusers", seed=0)
    el.export_ltx2(src, out / "pkg", dtype="float32", tiny=True, seed=0, max_length=TINY_MAX_LENGTH)
    from diffusers import LTX2Pipeline

    pipe = LTX2Pipeline.from_pretrained(src)
    pipe.set_progress_bar_config(disable=True)
    tensors = {}
    for name, case in CASES.items():
        with torch.no_grad():
            frames, video, audio, waveform = run_ltx2_pipeline(pipe, case, SEED)
        tensors[f"frames_{name}"] = frames
        tensors[f"waveform_{name}"] = waveform
        for i, (v, a) in enumerate(zip(video, audio)):
            tensors[f"latents_{name}_{i:03d}"] = v
            tensors[f"audio_{name}_{i:03d}"] = a
    import PIL.Image
    from diffusers import LTX2ImageToVideoPipeline

    from vgen_reference.wan_i2v_parity import test_image

    c = I2V_CASES["i2v"]
    pixels = test_image(c["height"], c["width"])
    PIL.Image.fromarray(pixels).save(out / "image.png")
    i2v = LTX2ImageToVideoPipeline.from_pipe(pipe)
    i2v.set_progress_bar_config(disable=True)
    for name, case in I2V_CASES.items():
        with torch.no_grad():
            frames, video, audio, waveform = run_ltx2_pipeline(
                i2v, {**case, "image": PIL.Image.fromarray(pixels), "image_crf": 0}, SEED)
        tensors[f"frames_{name}"] = frames
        tensors[f"waveform_{name}"] = waveform
        for i, (v, a) in enumerate(zip(video, audio)):
            tensors[f"latents_{name}_{i:03d}"] = v
            tensors[f"audio_{name}_{i:03d}"] = a
    dump_tensors(out / "ref", tensors, {"cases": CASES, "i2v_cases": I2V_CASES, "seed": SEED})
    print(json.dumps({"package": str(out / "pkg"), "reference": str(out / "ref" / "reference.pt"), "cases": CASES,
                      "i2v_cases": I2V_CASES, "image": str(out / "image.png"), "seed": SEED}))


if __name__ == "__main__":
    main()
