"""Reference for the LoRA parity test (tests/stages/test_lora.cpp): makes two rank-4 LoRAs for
the tiny Wan transformer with PEFT (random A and B), writes one in the diffusers/PEFT layout
and one in the original/ComfyUI Wan layout (keys renamed here, alpha as `.alpha` tensors),
then runs diffusers' WanPipeline with `load_lora_weights` + `set_adapters` on the parity case.

Usage: python -m vgen_reference.lora_parity PARITY_DIR OUT_DIR   (the C++ test runs this file by path)
  PARITY_DIR: what vgen_reference.wan_parity wrote (diffusers/, pkg/, parity.json).
  Prints JSON {lora_dir, reference, cases: [{name, loras: [[file, scale]], guidance, steps}]};
  reference.pt holds frames_<case> ([1, F, 3, H, W]) and base_<case> (the same without LoRA).
"""
import json
import pathlib
import sys

import torch

from vgen_export.reference_loop import dump_tensors, run_wan_pipeline
from vgen_export.tiny_wan import make_scheduler

RANK = 4
# diffusers module name (inside WanTransformer3DModel) -> original Wan name, for the layers
# a Wan LoRA usually touches.
ORIGINAL = {"attn1.to_q": "self_attn.q", "attn1.to_k": "self_attn.k", "attn1.to_v": "self_attn.v",
            "attn1.to_out.0": "self_attn.o", "attn2.to_q": "cross_attn.q", "attn2.to_k": "cross_attn.k",
            "attn2.to_v": "cross_attn.v", "attn2.to_out.0": "cross_attn.o", "ffn.net.0.proj": "ffn.0",
            "ffn.net.2": "ffn.2"}


def make_lora(transformer, targets, alpha, seed):
    """PEFT LoRA layers on `targets` with random A and B; returns PEFT's state dict
    (keys blocks.N.<module>.lora_A/B.weight) and its config."""
    from peft import LoraConfig, get_peft_model_state_dict

    config = LoraConfig(r=RANK, lora_alpha=alpha, target_modules=targets, init_lora_weights=False)
    transformer.add_adapter(config, adapter_name="made")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in transformer.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.25)
    state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(transformer, adapter_name="made").items()}
    transformer.delete_adapters("made")
    return state, config


def to_original(state, alpha):
    """The original/ComfyUI Wan naming: diffusion_model.blocks.N.self_attn.q.lora_down.weight,
    lora_up, and one .alpha scalar per layer."""
    out = {}
    for key, value in state.items():
        head, kind = key.rsplit(".lora_", 1)  # blocks.N.attn1.to_q, "A.weight"
        _, n, module = head.split(".", 2)
        base = f"diffusion_model.blocks.{n}.{ORIGINAL[module]}"
        out[f"{base}.{'lora_down' if kind.startswith('A') else 'lora_up'}.weight"] = value.contiguous()
        out[f"{base}.alpha"] = torch.tensor(float(alpha))
    return out


def main():
    torch.set_num_threads(1)
    parity = pathlib.Path(sys.argv[1])
    out = pathlib.Path(sys.argv[2])
    lora_dir = out / "loras"
    lora_dir.mkdir(parents=True, exist_ok=True)
    info = json.loads((parity / "parity.json").read_text())
    case, seed = dict(info["case"]), info["seed"]
    from diffusers import WanPipeline
    from safetensors.torch import save_file

    src = parity / "diffusers"
    pipe = WanPipeline.from_pretrained(src)
    # A: diffusers/PEFT layout, every attention and FFN linear, alpha 8 (scale alpha/rank = 2),
    # saved by diffusers itself with its adapter metadata.
    state_a, config_a = make_lora(pipe.transformer, list(ORIGINAL), alpha=8, seed=1)
    meta = config_a.to_dict()
    meta = {k: (sorted(v) if isinstance(v, set) else v) for k, v in meta.items() if k in ("r", "lora_alpha", "target_modules")}
    WanPipeline.save_lora_weights(lora_dir, transformer_lora_layers=state_a, weight_name="style_a.safetensors",
                                  transformer_lora_adapter_metadata=meta)
    # B: original/ComfyUI layout on self-attention and FFN only, alpha 2 (scale 0.5).
    state_b, _ = make_lora(pipe.transformer, ["attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
                                              "ffn.net.0.proj", "ffn.net.2"], alpha=2, seed=2)
    save_file(to_original(state_b, 2), str(lora_dir / "motion_b.safetensors"))

    cases = [
        {"name": "a", "loras": [["style_a", 0.8]]},
        {"name": "b", "loras": [["motion_b", 1.0]]},
        {"name": "ab", "loras": [["style_a", 0.7], ["motion_b", -0.6]]},
        # Few-step style: guidance 1 (no unconditional rows), two steps.
        {"name": "a_fast", "loras": [["style_a", 1.0]], "guidance": 1.0, "steps": 2},
    ]
    tensors = {}
    for c in cases:
        run = dict(case)
        if "guidance" in c:
            run["guidance_scale"] = c["guidance"]
        if "steps" in c:
            run["num_inference_steps"] = c["steps"]
        c["guidance"], c["steps"] = run["guidance_scale"], run["num_inference_steps"]
        loaded = pipe.get_list_adapters().get("transformer", [])
        if loaded:
            pipe.disable_lora()
        base, _ = run_wan_pipeline(pipe, run, seed, make_scheduler("unipc", flow_shift=3.0))
        for name, _ in c["loras"]:
            if name not in loaded:
                pipe.load_lora_weights(lora_dir, weight_name=f"{name}.safetensors", adapter_name=name)
        pipe.enable_lora()
        pipe.set_adapters([n for n, _ in c["loras"]], [s for _, s in c["loras"]])
        frames, _ = run_wan_pipeline(pipe, run, seed, make_scheduler("unipc", flow_shift=3.0))
        tensors[f"frames_{c['name']}"] = frames
        tensors[f"base_{c['name']}"] = base
        c["lora_effect"] = float((frames - base).abs().max())
    ref = dump_tensors(out / "ref", tensors, {"case": case, "seed": seed})
    print(json.dumps({"lora_dir": str(lora_dir), "reference": str(out / "ref" / "reference.pt"), "package": info["package"],
                      "case": case, "seed": seed, "cases": cases, "dump": str(ref)}))


if __name__ == "__main__":
    main()
