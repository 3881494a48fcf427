"""Set a vgen-shapes package's default sampler (scheduler and guidance) without retraining.

    python -m vgen_demo_model.set_sampler --model models/vgen-shapes --scheduler flow_euler --guidance 2 [--shift 2]

Rewrites the manifest's ``scheduler`` section (the diffusers config of the chosen scheduler,
its flow shift kept unless ``--shift`` is given) and ``defaults.guidance_scale``, and records the change under
``source.sampler``. Weights and their checksums are untouched. Every job may still override
both (``--scheduler``, ``--guidance``); this only changes what a job gets when it says nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vgen_export import manifest as mf
from vgen_export.tiny_wan import make_scheduler


def flow_shift_of(section: dict) -> float:
    config = section["config"]
    return float(config.get("flow_shift", config.get("shift", 3.0)))


def set_sampler(pkg: Path, kind: str, guidance: float, reason: str, shift: float | None = None) -> dict:
    manifest = json.loads((pkg / mf.MANIFEST_NAME).read_text())
    before = {"scheduler": manifest["scheduler"]["type"], "guidance_scale": manifest["defaults"]["guidance_scale"],
              "flow_shift": flow_shift_of(manifest["scheduler"])}
    shift = before["flow_shift"] if shift is None else shift
    manifest["scheduler"] = mf.scheduler_section(make_scheduler(kind, shift))
    manifest["defaults"]["guidance_scale"] = guidance
    earlier = manifest["source"].get("sampler")
    manifest["source"]["sampler"] = {"before": before, "reason": reason,
                                     "earlier": ([earlier] + earlier.pop("earlier", [])) if earlier else []}
    mf.write_manifest(pkg, manifest)
    mf.read_manifest(pkg)  # the reader's own checks (checksums included) still pass
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--scheduler", choices=("unipc", "flow_euler"), required=True)
    ap.add_argument("--guidance", type=float, required=True)
    ap.add_argument("--shift", type=float, default=None, help="flow shift (default: keep the package's)")
    ap.add_argument("--reason", default="", help="recorded in the manifest (source.sampler.reason)")
    a = ap.parse_args(argv)
    if not a.guidance >= 1.0:
        ap.error("--guidance must be >= 1")
    if a.shift is not None and not a.shift > 0:
        ap.error("--shift must be > 0")
    m = set_sampler(a.model, a.scheduler, a.guidance, a.reason, a.shift)
    print(f"{a.model}: scheduler {m['scheduler']['type']}, guidance {a.guidance}, flow shift {flow_shift_of(m['scheduler'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
