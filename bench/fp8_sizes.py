"""Transformer file sizes of the Wan 2.1 1.3B width, bf16 against its fp8 variant (issue 30):
export_transformer_variants with --quantize fp8 at 1 and 2 of the 30 layers (random weights,
CPU), then the per-block bytes scaled to 30 layers. Usage (from tools/ on PYTHONPATH):
    python bench/fp8_sizes.py OUT_DIR"""
import sys, torch, json, time
from pathlib import Path
torch.set_num_threads(1)
from diffusers import WanTransformer3DModel
from vgen_export.wan21_1_3b import TRANSFORMER_CONFIG
from vgen_export import wan as ew
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
res = {}
for layers in (1, 2):
    torch.manual_seed(0)
    t = WanTransformer3DModel(**{**TRANSFORMER_CONFIG, "num_layers": layers}).eval().to(torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    t0 = time.time()
    d = out / f"L{layers}"; d.mkdir(exist_ok=True)
    c = ew.export_transformer_variants("transformer", t, d, 16, torch.bfloat16, gen, "fp8")
    res[layers] = {"transformer": (d / "transformer.pt").stat().st_size, "transformer_fp8": (d / "transformer_fp8.pt").stat().st_size,
                   "seconds": round(time.time() - t0, 1),
                   "fp8_vs_float_max_abs": max(x["max_abs_diff_vs_float"] for x in c["transformer_fp8"]["checks"])}
    print(layers, res[layers], flush=True)
per_bf16 = res[2]["transformer"] - res[1]["transformer"]; per_fp8 = res[2]["transformer_fp8"] - res[1]["transformer_fp8"]
base_bf16 = res[1]["transformer"] - per_bf16; base_fp8 = res[1]["transformer_fp8"] - per_fp8
full = {"bf16": base_bf16 + 30 * per_bf16, "fp8": base_fp8 + 30 * per_fp8}
print(json.dumps({"per_block": {"bf16": per_bf16, "fp8": per_fp8}, "rest": {"bf16": base_bf16, "fp8": base_fp8},
                  "30_layers_extrapolated": full, "ratio": full["fp8"] / full["bf16"]}))
