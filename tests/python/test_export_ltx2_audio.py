"""tools/vgen_export/ltx2_audio.py on tiny random components (float32): the exported audio VAE
decoder and vocoder match diffusers' eager modules to 1e-4 at latent lengths other than the
traced one and at batch 2, the manifest entries carry what the C++ decoder needs, and the
decoded audio of packed latents through the exported modules matches diffusers' LTX2Pipeline
post-loop path (denormalise, unpack, audio_vae.decode, vocoder) to 1e-4. The C++ side is
stages.ltx2_audio (tests/stages/families/ltx2/test_ltx2_audio.cpp)."""
from __future__ import annotations

import torch

from vgen_export import ltx2_audio as la
from vgen_export.common import load_saved


def test_export_matches_diffusers_and_describes_the_sound(tmp_path):
    vae, vocoder = la.tiny_ltx2_audio(seed=3)
    entries = la.export_ltx2_audio(vae, vocoder, tmp_path, "float32")
    assert set(entries["components"]) == {"audio_vae", "vocoder"}
    for name, entry in entries["components"].items():
        assert (tmp_path / entry["file"]).is_file() and entry["format"] == "torchscript" and entry["dtype"] == "float32"
        checks = entries["checks"][name]["checks"]
        assert len({tuple(c["shape"]) for c in checks}) == 3
        assert max(c["max_abs_diff"] for c in checks) <= 1e-4, checks
    audio = entries["audio"]
    assert audio["sample_rate"] == 8000 and audio["channels"] == 2
    assert len(audio["latents_mean"]) == len(audio["latents_std"]) == audio["latent_channels"] * audio["latent_mel_bins"]

    # The whole post-loop path with the exported modules vs diffusers'.
    packed = torch.randn(2, 6, audio["latent_channels"] * audio["latent_mel_bins"], generator=torch.Generator().manual_seed(1))
    want = la.diffusers_audio(vae, vocoder, packed, audio["latent_mel_bins"])
    mean, std = torch.tensor(audio["latents_mean"]), torch.tensor(audio["latents_std"])
    z = (packed * std + mean).unflatten(2, (audio["latent_channels"], audio["latent_mel_bins"])).transpose(1, 2)
    with torch.no_grad():
        got = load_saved(tmp_path / "vocoder.pt")(load_saved(tmp_path / "audio_vae.pt")(z))
    assert got.shape == want.shape
    assert float((got - want).abs().max()) <= 1e-4
