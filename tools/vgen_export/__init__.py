"""vgen export tooling: diffusers checkpoints -> vgen model packages (docs/MODEL_PACKAGE.md).

Python here is tooling only; the vgen runtime never imports it. Command lines:
``python -m vgen_export.wan`` (Wan 2.1 / 2.2), ``python -m vgen_export.ltx`` (LTX-Video),
``python -m vgen_export.ltx2`` (LTX-2, video with audio latents),
``python -m vgen_export.latent_preview`` (add preview factors to a package).

Modules: wan, wan_i2v, wan_ti2v, ltx, ltx2 (one exporter per family and variant), common (what every
exporter shares: dtypes, tracing, saving, the jit-vs-eager checks), detect_wan, quantize,
latent_preview, manifest (format constants, read/validate), reference_loop and reference_i2v
(the generation algorithm over a package), tiny_wan, tiny_ltx and tiny_ltx2 (offline tiny test pipelines).
Exporters import shared parts from common, never each other's private helpers.
"""

from .manifest import FORMAT, FORMAT_VERSION  # noqa: F401
