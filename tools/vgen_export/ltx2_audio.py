"""LTX-2's sound: the audio VAE's decoder and the vocoder as TorchScript, for the ltx2 family.

diffusers 0.42 `LTX2Pipeline.__call__` ends its denoising loop with packed, normalised audio
latents [B, L, C*M] (L latent frames, C latent channels, M latent mel bins) and then
  1. denormalises them with audio_vae.latents_mean / latents_std (per packed feature, C*M),
  2. unpacks them to [B, C, L, M] (`_unpack_audio_latents` without patch sizes),
  3. decodes them with AutoencoderKLLTX2Audio.decode -> mel spectrogram [B, 2, T, mel_bins],
  4. turns that into a waveform [B, channels, samples] with its vocoder (LTX2Vocoder or
     LTX2VocoderWithBWE) at vocoder.config.output_sampling_rate.
Steps 3 and 4 are the two components exported here ("audio_vae": z -> mel, "vocoder": mel ->
waveform); steps 1 and 2 are data (the manifest's "audio" object) that the C++ decoder
(stages/families/ltx2/ltx2_audio.hpp) applies itself, as diffusers does.

`export_ltx2_audio(audio_vae, vocoder, out_dir, dtype)` is called by the ltx2 exporter; the
tiny components for tests come from `tiny_ltx2_audio()`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from . import manifest as mf
from .common import assert_checks, load_saved, max_diff, save_module, trace_quietly

# AutoencoderKLLTX2Audio: LATENT_DOWNSAMPLE_FACTOR (diffusers hard-codes 4 for time and mel).
LATENT_DOWNSAMPLE = 4


class AudioVaeDecoderExport(torch.nn.Module):
    """z [B, C, L, M] -> mel [B, 2, T, mel_bins], as AutoencoderKLLTX2Audio.decode."""

    def __init__(self, audio_vae: torch.nn.Module):
        super().__init__()
        self.decoder = audio_vae.decoder

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z)


class VocoderExport(torch.nn.Module):
    def __init__(self, vocoder: torch.nn.Module):
        super().__init__()
        self.vocoder = vocoder

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.vocoder(mel)


def audio_geometry(audio_vae) -> dict[str, Any]:
    cfg = audio_vae.config
    mel_bins = int(cfg.mel_bins)
    latent_mel_bins = mel_bins // audio_vae.mel_compression_ratio
    return {"latent_channels": int(cfg.latent_channels), "latent_mel_bins": latent_mel_bins, "mel_bins": mel_bins,
            "vae_sample_rate": int(cfg.sample_rate), "mel_hop_length": int(cfg.mel_hop_length),
            "temporal_compression": int(audio_vae.temporal_compression_ratio)}


def _trace_and_check(name: str, wrapper: torch.nn.Module, reference, inputs: list[torch.Tensor], path: Path,
                     tolerance: float) -> dict[str, Any]:
    """Traces on inputs[0], saves, and compares the saved module with `reference` on every input
    (other lengths than the traced one: the trace must not have baked a shape in)."""
    with torch.no_grad():
        traced = trace_quietly(wrapper, (inputs[0],))
        saved = save_module(traced, path)
        loaded = load_saved(path)
        checks = [{"shape": list(x.shape), "max_abs_diff": max_diff(loaded(x), reference(x)), "tolerance": tolerance}
                  for x in inputs]
    report = {"trace_shape": list(inputs[0].shape), **saved, "checks": checks}
    assert_checks(name, report)
    return report


def export_ltx2_audio(audio_vae, vocoder, out_dir: Path, dtype: str | torch.dtype = "float32",
                      seed: int = 0) -> dict[str, Any]:
    """Writes audio_vae.pt and vocoder.pt into out_dir and returns the manifest entries:
    {"components": {"audio_vae": ..., "vocoder": ...}, "audio": {...}, "checks": {...}}.
    Both run in `dtype` (a name of tools/vgen_export DTYPES or a torch dtype); each saved module is
    checked against the eager one at three latent lengths (ExportCheckFailed above 1e-4 in
    float32, a dtype-wide tolerance otherwise)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tdtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    dtype_name = str(tdtype).removeprefix("torch.")
    audio_vae = audio_vae.to(tdtype).eval()
    vocoder = vocoder.to(tdtype).eval()
    geo = audio_geometry(audio_vae)
    gen = torch.Generator().manual_seed(seed)
    c, m = geo["latent_channels"], geo["latent_mel_bins"]
    tolerance = 1e-4 if tdtype == torch.float32 else 5e-2
    zs = [torch.randn(b, c, n, m, generator=gen).to(tdtype) for b, n in ((1, 5), (1, 2), (2, 9))]
    vae_report = _trace_and_check("audio_vae", AudioVaeDecoderExport(audio_vae).eval(),
                                  lambda z: audio_vae.decode(z, return_dict=False)[0], zs, out_dir / "audio_vae.pt",
                                  tolerance)
    with torch.no_grad():
        mels = [audio_vae.decode(z, return_dict=False)[0] for z in zs]
    voc_report = _trace_and_check("vocoder", VocoderExport(vocoder).eval(), vocoder, mels, out_dir / "vocoder.pt",
                                  tolerance)
    with torch.no_grad():
        probe = vocoder(mels[0])
    vcfg = vocoder.config
    audio = {
        "sample_rate": int(vcfg.output_sampling_rate),
        "channels": int(probe.shape[1]),
        # What the C++ decoder does before the two modules (diffusers' _denormalize_audio_latents
        # and _unpack_audio_latents): packed feature f = channel * latent_mel_bins + mel bin.
        "latents_mean": [float(v) for v in audio_vae.latents_mean.float().tolist()],
        "latents_std": [float(v) for v in audio_vae.latents_std.float().tolist()],
        **geo,
    }
    if len(audio["latents_mean"]) != c * m:
        raise ValueError(f"audio_vae.latents_mean has {len(audio['latents_mean'])} entries, expected "
                         f"latent_channels * latent_mel_bins = {c * m}")
    components = {
        "audio_vae": mf.component_entry(out_dir, "audio_vae.pt", format="torchscript", dtype=dtype_name,
                                        methods=["forward"]),
        "vocoder": mf.component_entry(out_dir, "vocoder.pt", format="torchscript", dtype=dtype_name,
                                      methods=["forward"]),
    }
    return {"components": components, "audio": audio, "checks": {"audio_vae": vae_report, "vocoder": voc_report}}


def tiny_ltx2_audio(seed: int = 0):
    """Random tiny AutoencoderKLLTX2Audio and LTX2Vocoder (float32, built offline): 4 latent
    channels x 4 latent mel bins (16 mel bins), stereo mel, a vocoder upsampling 100 mel frames/s
    by 80 to an 8 kHz stereo waveform. latents_mean/std are random too, so the C++ decoder's
    denormalisation is tested."""
    from diffusers import AutoencoderKLLTX2Audio
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    torch.manual_seed(seed)
    vae = AutoencoderKLLTX2Audio(base_channels=16, output_channels=2, ch_mult=(1, 2, 4), num_res_blocks=1,
                                 in_channels=2, resolution=16, latent_channels=4, mel_bins=16, sample_rate=16000,
                                 mel_hop_length=160)
    with torch.no_grad():
        vae.latents_mean.copy_(torch.randn(16) * 0.1)
        vae.latents_std.copy_(torch.rand(16) + 0.5)
    vocoder = LTX2Vocoder(in_channels=2 * 16, hidden_channels=32, out_channels=2, upsample_kernel_sizes=[8, 8, 10],
                          upsample_factors=[4, 4, 5], resnet_kernel_sizes=[3], resnet_dilations=[[1, 3]],
                          output_sampling_rate=8000)
    return vae.eval(), vocoder.eval()


def diffusers_audio(audio_vae, vocoder, packed: torch.Tensor, latent_mel_bins: int) -> torch.Tensor:
    """LTX2Pipeline.__call__'s audio after the loop (output_type != "latent"), from its packed latents."""
    from diffusers import LTX2Pipeline

    with torch.no_grad():
        z = LTX2Pipeline._denormalize_audio_latents(packed, audio_vae.latents_mean, audio_vae.latents_std)  # noqa: SLF001
        z = LTX2Pipeline._unpack_audio_latents(z, packed.shape[1], num_mel_bins=latent_mel_bins)  # noqa: SLF001
        mel = audio_vae.decode(z.to(audio_vae.dtype), return_dict=False)[0]
        return vocoder(mel)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.vgen_export.ltx2_audio",
                                     description="Export LTX-2's audio VAE decoder and vocoder (tiny random ones "
                                                 "with --tiny) and print the manifest entries")
    parser.add_argument("--diffusers", type=Path, help="an LTX-2 diffusers folder (audio_vae/, vocoder/)")
    parser.add_argument("--tiny", action="store_true", help="random tiny components instead")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.tiny:
        vae, vocoder = tiny_ltx2_audio()
    elif args.diffusers:
        from diffusers import AutoencoderKLLTX2Audio
        from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE

        vae = AutoencoderKLLTX2Audio.from_pretrained(args.diffusers, subfolder="audio_vae")
        vcfg = json.loads((args.diffusers / "vocoder" / "config.json").read_text())
        cls = LTX2VocoderWithBWE if vcfg.get("_class_name") == "LTX2VocoderWithBWE" else LTX2Vocoder
        vocoder = cls.from_pretrained(args.diffusers, subfolder="vocoder")
    else:
        parser.error("give --diffusers DIR or --tiny")
    entries = export_ltx2_audio(vae, vocoder, args.out, args.dtype)
    print(json.dumps({"components": entries["components"], "audio": {k: v for k, v in entries["audio"].items()
                                                                       if not k.startswith("latents_")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
