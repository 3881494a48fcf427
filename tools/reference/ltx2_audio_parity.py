"""Reference for the C++ parity test of LTX-2's audio decoder
(tests/stages/families/ltx2/test_ltx2_audio.cpp): builds tiny random AutoencoderKLLTX2Audio and
LTX2Vocoder offline (float32), exports them with vgen_export.ltx2_audio into OUT_DIR/package
(audio_vae.pt, vocoder.pt and ltx2_audio.json: the manifest entries export_ltx2_audio returns),
and runs diffusers' own post-loop audio path (LTX2Pipeline._denormalize_audio_latents,
_unpack_audio_latents, audio_vae.decode, vocoder) on packed latents as LTX2Pipeline.__call__
holds them when its denoising loop ends.

Usage: python -m vgen_reference.ltx2_audio_parity OUT_DIR -> prints JSON {package, manifest,
reference, cases}; reference.pt holds latents_<case> [B, L, C*M] and audio_<case> [B, channels,
samples] (C++: attr(NAME))."""
import json
import pathlib
import sys

import torch

from vgen_export import ltx2_audio as la
from vgen_export.reference_loop import dump_tensors

# Two clips: one job of 7 latent frames, and a batch of two of 5 (B > 1 is split into tracks).
CASES = {"one": (1, 7), "two": (2, 5)}
SEED = 4321


def main(out_dir: str) -> int:
    out = pathlib.Path(out_dir)
    vae, vocoder = la.tiny_ltx2_audio(seed=SEED)
    pkg = out / "package"
    entries = la.export_ltx2_audio(vae, vocoder, pkg, "float32")
    (pkg / "ltx2_audio.json").write_text(json.dumps({"components": entries["components"], "audio": entries["audio"]}))
    geo = entries["audio"]
    gen = torch.Generator().manual_seed(SEED)
    tensors, worst = {}, {}
    for name, (batch, length) in CASES.items():
        packed = torch.randn(batch, length, geo["latent_channels"] * geo["latent_mel_bins"], generator=gen)
        audio = la.diffusers_audio(vae, vocoder, packed, geo["latent_mel_bins"])
        tensors[f"latents_{name}"] = packed
        tensors[f"audio_{name}"] = audio
        worst[name] = list(audio.shape)
    dump_tensors(out, tensors, {"cases": CASES, "seed": SEED})
    print(json.dumps({"package": str(pkg), "manifest": str(pkg / "ltx2_audio.json"),
                      "reference": str(out / "reference.pt"), "cases": worst,
                      "export_checks": {k: max(c["max_abs_diff"] for c in v["checks"])
                                        for k, v in entries["checks"].items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
