"""The GPU check's attention probe (issue 30 item 2): PyTorch's scaled-dot-product attention alone,
at the single job's shapes, one backend at a time, to tell which backend a denoiser step should
run (vgen's `model_backend.attention` orders them; PyTorch 2.11's default priority is flash,
efficient, math, cuDNN, so cuDNN is never reached by default: math always can run).

sdpa_probe: the attention calls of one Wan 2.1 denoiser call as vgen makes it (the CFG pair as
two rows; diffusers runs them as two one-row passes, the same attention work), shapes from the
transformer's config in WORK/diffusers and shapes()["single"]: self-attention over the clip's
tokens (832x480x81: 21 x 30 x 52 = 32760), cross-attention to the 512 zero-padded text rows with
no mask (diffusers' forward) and to the compact context with its additive key bias [B,1,1,T]
in the activation dtype (vgen's forward_compact; T and the bias from the package's tokenizer on
the check's prompt and negative prompt, as reference_loop.compact_context builds them). q, k, v
are [B,L,H,D] views permuted to [B,H,L,D], as diffusers passes them. Per case and backend
(torch.nn.attention.sdpa_kernel with that backend alone): one warm-up call, then timed calls
(median; CUDA events on a GPU, the host clock on a CPU), peak memory above the inputs (CUDA),
max |diff| against the flash result (efficient for the masked case); a backend that refuses the
case is recorded as refused with PyTorch's message and warnings, not a failure; math is skipped
where its float32 scores would not fit in the free memory. Also: the backend PyTorch's default
priority picks (torch._fused_sdp_choice), the one it picks with vgen's cuDNN-first order, and per
backend the attention time of one denoiser step computed from these calls (layers x (self + cross), with
the 512 rows and with the compact context) and its share of the measured s/step of vgen_single
(with the cross case its package runs: the export keeps forward_compact off where it misses
float32's tolerance, as the H200's bf16 package did in run 3) and of diffusers_single, when
those phases ran before this one, to set beside step_profile's attention share.
On --device cpu --tiny: the tiny model at its shape, with what a CPU offers (flash for CPU and
math; efficient and cuDNN refused); there a call of microseconds' work is timed with the driver's
thread count, so on a loaded machine the figures measure the threads' wake-up (the tiny self
case on the shared 2-core machine at a load average of 2.5, 2026-11-28 11:15: ~8 ms a call with
2 threads, 0.025 ms with 1) and the shares are not a step's: it exercises the code only.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import warnings
from pathlib import Path

from vgen_gpu.measure import sync
from vgen_gpu.phases import NEGATIVE, PROMPTS, shapes

BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
# vgen's order when cuDNN is asked for first (model_backend.attention, phase vgen_single_cudnn)
CUDNN_FIRST = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
ROWS = 2  # the CFG pair, one call


def attention_shapes(args) -> dict:
    """Heads, head size, layers, tokens and both contexts' rows from WORK (the model, the package)."""
    import torch

    from vgen_export.reference_loop import compact_context, spm_tokenize

    work = Path(args.work)
    cfg = json.loads((work / "diffusers" / "transformer" / "config.json").read_text())
    shape = shapes(args.tiny, args.steps)["single"]
    manifest = json.loads((work / "pkg" / "manifest.json").read_text())
    lat, tok = manifest["latent"], manifest["tokenizer"]
    pt, ph, pw = cfg["patch_size"]
    frames = (shape["frames"] - 1) // lat["temporal_scale"] + 1
    grid = [frames // pt, shape["height"] // lat["spatial_scale"] // ph, shape["width"] // lat["spatial_scale"] // pw]
    _, mask = spm_tokenize(work / "pkg" / tok["file"], [PROMPTS[0], NEGATIVE], tok["max_length"], clean=True)
    lengths = [int(n) for n in mask.sum(1)]
    _, bias = compact_context(torch.zeros(ROWS, tok["max_length"], 1), lengths)
    return {"heads": cfg["num_attention_heads"], "head_dim": cfg["attention_head_dim"], "layers": cfg["num_layers"],
            "rows": ROWS, "token_grid": grid, "tokens": math.prod(grid), "text_rows": tok["max_length"],
            "prompt_tokens": lengths, "compact_rows": int(bias.size(1)), "compact_bias": bias, "shape": shape,
            # the runtime calls forward_compact only where the export found it within tolerance
            "vgen_cross": "cross_compact" if manifest["transformer"].get("compact_context") else "cross_padded"}


def make_case(s: dict, keys: int, masked: bool, device: str, dtype, gen) -> dict:
    import torch

    def heads_first(length):  # diffusers: [B,L,H,D] projections, permuted for SDPA
        return torch.randn(s["rows"], length, s["heads"], s["head_dim"], generator=gen).to(device, dtype).permute(0, 2, 1, 3)

    case = {"q": heads_first(s["tokens"]), "k": heads_first(keys), "v": heads_first(keys), "mask": None}
    if masked:  # _KeyBiasProcessor's mask: the bias in the activation dtype, [B,1,1,T]
        case["mask"] = s["compact_bias"][:, None, None, :].to(device, dtype)
    return case


def backend(name: str):
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, name)


def math_bytes(s: dict, keys: int) -> int:
    """The math backend's float32 scores and probabilities (it upcasts bf16: PyTorch's default)."""
    return 2 * 4 * s["rows"] * s["heads"] * s["tokens"] * keys


def run_backend(args, name: str, case: dict, reps: int) -> tuple[dict, object]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    cuda = args.device == "cuda"
    if name == "MATH" and cuda:
        free = torch.cuda.mem_get_info()[0]
        need = math_bytes(case["s"], case["k"].size(2))
        if need > 0.8 * free:
            return {"status": "skipped", "reason": f"math's float32 scores and probabilities need ~{need / 2**30:.0f} GiB "
                                                   f"(2 x rows x heads x queries x keys x 4 bytes), more than 0.8 of the "
                                                   f"{free / 2**30:.0f} GiB free"}, None

    def call():
        return F.scaled_dot_product_attention(case["q"], case["k"], case["v"], attn_mask=case["mask"])

    with sdpa_kernel([backend(name)]), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sync(args.device)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated() if cuda else 0
            out = call()  # the warm-up
            sync(args.device)
            times = []
            for _ in range(reps):  # CUDA events on a GPU: the compact cross call has 21/32760 of self's FLOPs
                if cuda:
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    out = call()
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) / 1000.0)
                else:
                    t0 = time.perf_counter()
                    out = call()
                    times.append(time.perf_counter() - t0)
        except torch.OutOfMemoryError as e:
            torch.cuda.empty_cache()
            return {"status": "out_of_memory", "error": str(e)[:300]}, None
        except RuntimeError as e:  # "No available kernel" (CUDA), "No viable backend" (CPU)
            return {"status": "refused", "error": str(e)[:300],
                    "warnings": sorted({str(w.message)[:300] for w in caught})[:6]}, None
    row = {"status": "ok", "ms": round(statistics.median(times) * 1000.0, 4), "ms_all": [round(t * 1000.0, 4) for t in times]}
    if cuda:
        row["peak_above_inputs_mib"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
    if not torch.isfinite(out.float()).all():
        row["finite"] = False
    return row, out


def choice(case: dict, order: tuple[str, ...] | None = None) -> str:
    """The backend PyTorch's priority (the default, or `order` first) picks for the case."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def pick():
        try:
            return SDPBackend(torch._fused_sdp_choice(case["q"], case["k"], case["v"], case["mask"])).name
        except RuntimeError as e:  # recorded: the timings are still worth having
            return f"error: {str(e)[:200]}"

    if order is None:
        return pick()
    with sdpa_kernel([backend(n) for n in order], set_priority=True):
        return pick()


def measured_step_s(work: Path) -> dict:
    """s/step of the single-job phases that ran before this one (their phase files in WORK)."""
    out = {}
    for phase, get in (("vgen_single", lambda r: r["bfloat16"]["s_per_step"]), ("diffusers_single", lambda r: r["s_per_step"])):
        f = work / f"phase-{phase}.json"
        if f.is_file():
            x = json.loads(f.read_text())
            if x.get("status") == "ok" and get(x["result"]):
                out[phase] = get(x["result"])
    return out


def projection(s: dict, cases: dict, steps: dict, vgen_cross: str) -> dict:
    """Per backend (and PyTorch's default pick per case): attention ms of one denoiser step,
    layers x (self + cross), with the 512 padded rows (diffusers; vgen when its package's
    compact_context is false) and with the compact context; the shares of the measured s/step
    of vgen_single (with the cross case vgen runs) and diffusers_single (padded)."""
    res = {}
    for name in BACKENDS + ("default",):
        def ms(case):
            pick = cases[case]["default_choice"] if name == "default" else name
            return cases[case]["backends"].get(pick, {}).get("ms")

        row = {}
        for key, cross in (("step_ms_512_rows", "cross_padded"), ("step_ms_compact", "cross_compact")):
            a, b = ms("self"), ms(cross)
            row[key] = round(s["layers"] * (a + b), 3) if a is not None and b is not None else None
        for phase, key in (("vgen_single", "step_ms_compact" if vgen_cross == "cross_compact" else "step_ms_512_rows"),
                           ("diffusers_single", "step_ms_512_rows")):
            if phase in steps and row[key] is not None:
                row[f"share_of_{phase}_step"] = round(row[key] / (steps[phase] * 1000.0), 4)
        res[name] = row
    return res


def phase_sdpa_probe(args) -> dict:
    import torch
    import torch.nn.attention as attention

    s = attention_shapes(args)
    cuda = args.device == "cuda"
    reps, dtype, gen = (5 if cuda else 3), torch.bfloat16, torch.Generator().manual_seed(7)
    plan = {"self": (s["tokens"], False), "cross_padded": (s["text_rows"], False), "cross_compact": (s["compact_rows"], True)}
    res = {"shape": s["shape"], **{k: s[k] for k in ("heads", "head_dim", "layers", "rows", "token_grid", "tokens",
                                                       "text_rows", "prompt_tokens", "compact_rows")},
           "dtype": "bfloat16", "torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
           "default_priority": [torch.nn.attention.SDPBackend(i).name for i in torch._C._get_sdp_priority_order()],
           "flash_impls": attention.list_flash_attention_impls(), "flash_impl_active": attention.current_flash_attention_impl(),
           "cases": {}}
    with torch.no_grad():
        for case_name, (keys, masked) in plan.items():
            case = make_case(s, keys, masked, args.device, dtype, gen)
            case["s"] = s
            row = {"q": list(case["q"].shape), "kv": list(case["k"].shape), "mask": list(case["mask"].shape) if masked else None,
                   "default_choice": choice(case), "cudnn_first_choice": choice(case, CUDNN_FIRST), "backends": {}}
            ref_name, ref = None, None
            outs = {}
            for name in BACKENDS:
                row["backends"][name], out = run_backend(args, name, case, reps)
                if out is not None:
                    outs[name] = out
            for name in (("EFFICIENT_ATTENTION", "FLASH_ATTENTION") if masked else ("FLASH_ATTENTION", "EFFICIENT_ATTENTION")) + BACKENDS:
                if name in outs:
                    ref_name, ref = name, outs[name].float()
                    break
            row["reference"] = ref_name
            for name, out in outs.items():
                row["backends"][name]["max_abs_diff_vs_reference"] = float((out.float() - ref).abs().max())
            del outs, ref, case
            if cuda:
                torch.cuda.empty_cache()
            res["cases"][case_name] = row
    res["vgen_cross"] = s["vgen_cross"]
    res["measured_s_per_step"] = measured_step_s(Path(args.work))
    res["per_step"] = projection(s, res["cases"], res["measured_s_per_step"], s["vgen_cross"])
    res["terms"] = (f"one call's attention: rows={ROWS} (the CFG pair), CUDA events (CPU: host clock), median of {reps} after one "
                    "warm-up; per_step: layers x (self + cross), computed from those calls, not measured as a step; "
                    "vgen_cross: the cross case vgen's package runs (manifest transformer.compact_context)")
    return res
