"""vgen export tooling: diffusers Wan 2.1 T2V -> vgen model package (docs/MODEL_PACKAGE.md).

Python here is tooling only; the vgen runtime never imports it.
Modules: tiny_wan (offline tiny test pipeline), export_wan (tracing + CLI), manifest
(format constants, read/validate), reference_loop (the generation algorithm over a package).
"""

from .manifest import FORMAT, FORMAT_VERSION  # noqa: F401
