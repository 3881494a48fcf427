"""The tiny Wan package of wan_parity.py (same seed, so the same weights and the same diffusers
reference) exported with --compile aoti: its transformer and its VAE's whole-clip decode also as
AOTInductor .pt2 files for the CPU.
The C++ parity test (tests/stages/families/wan/test_wan_family.cpp) renders it against
wan_parity's reference, and against the package's own TorchScript transformer.

Usage: python -m vgen_reference.wan_aoti_parity OUT_DIR  -> prints JSON {package, aoti}."""
import json
import pathlib
import sys

import torch

from vgen_export import wan as ew
from vgen_export.tiny_wan import write_tiny_wan


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = write_tiny_wan(out / "diffusers", seed=0)
    manifest = ew.export_wan(src, out / "pkg", dtype="float32", tiny=True, seed=0, compile="aoti")
    print(json.dumps({"package": str(out / "pkg"), "aoti": manifest["export_checks"]["transformer"]["aoti"],
                      "vae_decoder_aoti": manifest["export_checks"]["vae_decoder"]["aoti"]}))


if __name__ == "__main__":
    main()
