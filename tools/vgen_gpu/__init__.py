"""The GPU check (tools/gpu_check.sh runs `python -m vgen_gpu.check` from the bundle)."""
