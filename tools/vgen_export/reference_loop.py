"""The reference text-to-video loop over an exported vgen model package (Python, LibTorch ops).

This is, step for step, the algorithm the C++ runtime implements, and it reproduces
``diffusers.WanPipeline(...)(output_type="pt")`` (see tests/python/test_export_wan.py):

1. prompt_clean, SentencePiece tokenize (+eos), right-pad to ``max_length``;
2. ``text_encoder.pt`` on [prompt; negative_prompt] as one batch (output already masked);
3. initial noise ``torch.randn((1, C, (F-1)/4+1, H/8, W/8), generator=seeded CPU generator)``;
4. scheduler loop: ``transformer.pt`` on the [cond; uncond] batch, CFG
   ``uncond + g * (cond - uncond)`` (skipped when g <= 1), ``scheduler.step``;
5. un-normalise ``latents / (1 / std) + mean``; ``vae_decoder.pt``; frames ``(v/2 + 0.5).clamp(0, 1)``.

``run_reference(..., dump_dir=...)`` writes every intermediate tensor for C++ parity tests.
"""

from __future__ import annotations

import functools
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .common import DTYPES, load_saved
from .manifest import read_manifest



def prompt_clean(text: str) -> str:
    """WanPipeline's prompt_clean without ftfy (ftfy is not installed in our venv)."""
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


@functools.lru_cache(maxsize=8)
def _spm(path: str):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=path)


def spm_tokenize(spm_file: Path | str, prompts: list[str], max_length: int,
                 clean: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """ids = pieces[:max_length-1] + [eos], right-padded with pad_id; mask = 1 on real tokens."""
    sp = _spm(str(spm_file))
    ids = torch.full((len(prompts), max_length), sp.pad_id(), dtype=torch.long)
    mask = torch.zeros((len(prompts), max_length), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        pieces = sp.encode(prompt_clean(prompt) if clean else prompt)[: max_length - 1] + [sp.eos_id()]
        ids[row, : len(pieces)] = torch.tensor(pieces, dtype=torch.long)
        mask[row, : len(pieces)] = 1
    return ids, mask


def check_tokenizer(hf_tokenizer_dir: Path | str, spm_file: Path | str, max_length: int,
                    extra_prompts: list[str] = ()) -> dict[str, Any]:
    """The C++ runtime tokenizes with libsentencepiece: check that ``spm_tokenize`` agrees
    with the pipeline's transformers tokenizer (ids and mask after padding/truncation)."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(hf_tokenizer_dir)
    prompts = ["a red circle moving left on a black background", "", "Hello, World!  x 12",
               "A cat and a dog baking a cake together in a kitchen.", "red " * (max_length + 8),
               *extra_prompts]
    mismatches = []
    for prompt in prompts:
        ref = hf([prompt], padding="max_length", max_length=max_length, truncation=True,
                 add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        ids, mask = spm_tokenize(spm_file, [prompt], max_length)
        if not (torch.equal(ids, ref.input_ids) and torch.equal(mask, ref.attention_mask)):
            mismatches.append(prompt[:80])
    return {"prompts_checked": len(prompts), "mismatches": len(mismatches), "mismatched": mismatches}


@dataclass
class WanPackage:
    root: Path
    manifest: dict[str, Any]
    text_encoder: torch.jit.ScriptModule
    transformer: torch.jit.ScriptModule
    vae_decoder: torch.jit.ScriptModule

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.manifest["dtype"]]

    def make_scheduler(self):
        import diffusers

        section = self.manifest["scheduler"]
        return getattr(diffusers, section["type"]).from_config(section["config"])


def load_package(pkg_dir: Path | str) -> WanPackage:
    root = Path(pkg_dir)
    manifest = read_manifest(root, verify_files=True)
    comp = manifest["components"]

    def load(name: str):
        return load_saved(root / comp[name]["file"], map_location="cpu").eval()

    return WanPackage(root, manifest, load("text_encoder"), load("transformer"), load("vae_decoder"))


def validate_request(manifest: dict[str, Any], height: int, width: int, frames: int) -> None:
    for name, value in (("height", height), ("width", width)):
        rule = manifest["resolution"][name]
        if value % rule["multiple_of"] or not rule["min"] <= value <= rule["max"]:
            raise ValueError(f"{name}={value}: must be a multiple of {rule['multiple_of']} in "
                             f"[{rule['min']}, {rule['max']}]")
    rule, k = manifest["frames"], manifest["frames"]["k_multiple"]
    if (frames - 1) % k != 0 or not rule["min"] <= frames <= rule["max"]:
        raise ValueError(f"frames={frames}: must be {k}k+1 in [{rule['min']}, {rule['max']}]")


def encode_prompts(pkg: WanPackage, prompts: list[str]) -> dict[str, torch.Tensor]:
    tok = pkg.manifest["tokenizer"]
    ids, mask = spm_tokenize(pkg.root / tok["file"], prompts, tok["max_length"], clean=True)
    with torch.no_grad():
        embeds = pkg.text_encoder(ids, mask)
    return {"input_ids": ids, "attention_mask": mask, "prompt_embeds": embeds}


def initial_noise(manifest: dict[str, Any], height: int, width: int, frames: int, seed: int,
                  batch: int = 1) -> torch.Tensor:
    lat = manifest["latent"]
    shape = (batch, lat["channels"], (frames - 1) // lat["temporal_scale"] + 1,
             height // lat["spatial_scale"], width // lat["spatial_scale"])
    return torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed), dtype=torch.float32)


def unnormalise(manifest: dict[str, Any], latents: torch.Tensor) -> torch.Tensor:
    lat = manifest["latent"]
    view = (1, lat["channels"], 1, 1, 1)
    mean = torch.tensor(lat["latents_mean"], dtype=torch.float32).view(view)
    inv_std = 1.0 / torch.tensor(lat["latents_std"], dtype=torch.float32).view(view)
    return latents.float() / inv_std + mean  # exactly diffusers' expression (float32)


def compact_context(embeds: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """[B,L,D] zero-padded prompt embeddings and each row's true length -> (context [B,T,D],
    bias float32 [B,T]) for forward_compact (what stages/text_context.cpp builds in C++)."""
    full = embeds.size(1)
    t = min(full, max(2, *(n + (1 if n < full else 0) for n in lengths)))  # >= 2, as context_rows
    context = embeds[:, :t].clone()
    bias = torch.zeros(len(lengths), t)
    for row, n in enumerate(lengths):
        context[row, n:] = 0
        if n < full:
            bias[row, n] = torch.log(torch.tensor(float(full - n), dtype=torch.float64)).item()
            bias[row, n + 1:] = float("-inf")
    return context, bias


def run_reference(pkg: WanPackage | Path | str, prompt: str, negative_prompt: str | None = None,
                  height: int | None = None, width: int | None = None, num_frames: int | None = None,
                  num_inference_steps: int | None = None, guidance_scale: float | None = None,
                  seed: int = 0, dump_dir: Path | str | None = None,
                  scheduler=None, compact: bool = False) -> dict[str, Any]:
    """Generate with the exported components. ``None`` arguments take the manifest defaults,
    except ``negative_prompt`` which, as in WanPipeline, is "" when None. ``scheduler`` (a
    diffusers scheduler) replaces the manifest's, e.g. to check FlowMatchEuler. ``compact``:
    call ``transformer.forward_compact`` on the compacted text context, as the runtime does
    for a package with ``transformer.compact_context`` (docs/MODEL_PACKAGE.md).
    Returns a dict: "frames" [1,F,3,H,W] float32 in [0,1] (== WanPipeline output_type="pt"),
    "video" [1,3,F,H,W] in [-1,1], "timesteps", "sigmas", and per-step tensors."""
    if not isinstance(pkg, WanPackage):
        pkg = load_package(pkg)
    man, dflt = pkg.manifest, pkg.manifest["defaults"]
    height = height or dflt["height"]
    width = width or dflt["width"]
    num_frames = num_frames or dflt["frames"]
    steps = num_inference_steps or dflt["steps"]
    g = dflt["guidance_scale"] if guidance_scale is None else guidance_scale
    validate_request(man, height, width, num_frames)
    cfg = g > 1.0
    rec: dict[str, Any] = {}

    prompts = [prompt] + ([negative_prompt or ""] if cfg else [])
    rec.update(encode_prompts(pkg, prompts))
    embeds = rec["prompt_embeds"].to(pkg.dtype)
    denoise = pkg.transformer
    if compact:
        lengths = [int(n) for n in rec["attention_mask"].sum(1)]
        embeds, bias = compact_context(embeds, lengths)
        denoise = lambda x, t, e: pkg.transformer.forward_compact(x, t, e, bias)  # noqa: E731

    scheduler = scheduler or pkg.make_scheduler()
    scheduler.set_timesteps(steps)
    scheduler.set_begin_index(0)
    rec["timesteps"], rec["sigmas"] = scheduler.timesteps.clone(), scheduler.sigmas.clone()
    latents = initial_noise(man, height, width, num_frames, seed)
    rec["latents_init"] = latents.clone()

    with torch.no_grad():
        for i, t in enumerate(scheduler.timesteps):
            x = latents.to(pkg.dtype)
            batch = torch.cat([x, x]) if cfg else x
            timestep = t.to(torch.float32).expand(batch.shape[0]).contiguous()
            pred = denoise(batch, timestep, embeds)
            if cfg:
                cond, uncond = pred.chunk(2)
                pred = uncond + g * (cond - uncond)
            latents = scheduler.step(pred, t, latents, return_dict=False)[0]
            rec[f"noise_pred_{i:03d}"] = pred.clone()
            rec[f"latents_{i:03d}"] = latents.clone()
        rec["latents_final"] = latents.clone()
        z = unnormalise(man, latents)
        rec["latents_unnormalised"] = z
        video = pkg.vae_decoder(z)
    rec["video"] = video
    rec["frames"] = (video / 2 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4).contiguous()
    if dump_dir is not None:
        params = {"prompt": prompt, "negative_prompt": negative_prompt or "", "height": height,
                  "width": width, "num_frames": num_frames, "num_inference_steps": steps,
                  "guidance_scale": g, "seed": seed}
        dump_tensors(dump_dir, rec, params)
    return rec


class _TensorBag(torch.nn.Module):
    def __init__(self, tensors: dict[str, torch.Tensor]):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor.detach().contiguous())

    def forward(self) -> int:
        return 0


def dump_tensors(dump_dir: Path | str, tensors: dict[str, Any], params: dict[str, Any]) -> Path:
    """Write ``NAME.npy`` (float32 for half dtypes), ``reference.pt`` (a TorchScript module
    whose buffers are the tensors: C++ reads ``module.attr(NAME).toTensor()``) and
    ``reference.json`` (params plus name -> shape/dtype)."""
    import numpy as np

    out = Path(dump_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    index = {}
    for name, tensor in tensors.items():
        array = tensor.detach().cpu()
        if array.dtype in (torch.float16, torch.bfloat16):
            array = array.float()
        np.save(out / f"{name}.npy", array.numpy())
        index[name] = {"shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", "")}
    torch.jit.script(_TensorBag(tensors)).save(str(out / "reference.pt"))
    (out / "reference.json").write_text(json.dumps({"params": params, "tensors": index}, indent=2) + "\n")
    return out


def run_wan_pipeline(pipe, case: dict[str, Any], seed: int, scheduler=None):
    """diffusers' own WanPipeline on ``case`` (its call arguments): frames (output_type="pt",
    [1,F,3,H,W]) and the latents after every step. ``scheduler`` replaces the pipeline's."""
    if scheduler is not None:
        pipe = type(pipe)(**{**pipe.components, "scheduler": scheduler})
    pipe.set_progress_bar_config(disable=True)
    steps = []

    def record(_pipe, _i, _t, kwargs):
        steps.append(kwargs["latents"].clone())
        return {}

    frames = pipe(**case, generator=torch.Generator().manual_seed(seed), output_type="pt",
                  callback_on_step_end=record).frames
    return frames, steps
