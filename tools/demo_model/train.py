"""Train the vgen-shapes text-to-video model on clips.py clips, then export the package.

    python -m vgen_demo_model.train --out models/vgen-shapes [--steps 3000 --seed 0]
        [--batch 12] [--time-limit-min 0] [--ckpt build/vgen-shapes-train/ckpt.pt] [--resume]

Single-threaded by default (``--threads 1``). Writes a SentencePiece tokenizer and a checkpoint
(model, EMA, optimiser, step) every ``--ckpt-every`` steps next to ``--ckpt``; logs loss and time.
A partial run is exported with ``python -m vgen_demo_model.export --ckpt ... --out ...``.

Objective: flow matching as Wan/diffusers (x_t = (1-s) x0 + s noise, flow = noise - x0). The
denoiser predicts x0 internally; the loss is an x0 MSE weighted by min(1/s, 10) and up-weighted
on object pixels; 10% of prompts are dropped to "" for classifier-free guidance.
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from vgen_export.reference_loop import spm_tokenize

from . import clips
from .model import Denoiser, TextEncoder, build_models

ROOT = Path(__file__).resolve().parents[2]  # the repository: default paths (models/, build/)

CONFIG = {"max_length": 16, "text_dim": 64, "text_layers": 0, "chans": [16, 32, 64, 128], "cond": 128,
          "frames": 16, "size": 32, "spatial_scale": 8, "flow_shift": 3.0, "vocab_size": 64}


def train_tokenizer(out_file: Path, seed: int, vocab_size: int) -> Path:
    """T5 convention (pad 0, eos 1, unk 2, no bos) unigram model on the prompt language."""
    import sentencepiece as spm

    corpus = clips.corpus(seed)
    # Every word also on its own: the unigram trainer then keeps whole words as pieces
    # (a prompt is ~9 pieces + eos instead of ~35 characters).
    words = sorted({w for p in corpus for w in p.split()})
    corpus += [" ".join(words)] * 50 + [w for w in words for _ in range(30)]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=buf, vocab_size=vocab_size,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>",
        eos_piece="</s>", unk_piece="<unk>", character_coverage=1.0, num_threads=1, minloglevel=2,
        hard_vocab_limit=False)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_bytes(buf.getvalue())
    return out_file


def sample_sigma(n: int, shift: float, gen: torch.Generator) -> torch.Tensor:
    """20% exactly 1 (pure noise: where the sampler's first step must lay out the clip from the
    prompt alone; these clips are so simple that at sigma 0.9 the object is still visible in the
    noise, so without them the net never learned the layout), 50% the sampler's shifted
    distribution, 30% uniform; in (0.001, 1]."""
    u = torch.rand(n, generator=gen)
    shifted = shift * u / (1 + (shift - 1) * u)
    pick = torch.rand(n, generator=gen)
    sigma = torch.where(pick < 0.5, shifted, u)
    return torch.where(pick >= 0.8, torch.ones_like(sigma), sigma).clamp(1e-3, 1.0)


def load_package_weights(pkg: Path, te: TextEncoder, den: Denoiser) -> None:
    """Warm start from an exported package's TorchScript weights (the shipped model keeps no
    training checkpoint). The package must have this architecture (strict load)."""
    te.load_state_dict(torch.jit.load(str(pkg / "text_encoder.pt")).state_dict())
    den.load_state_dict(torch.jit.load(str(pkg / "transformer.pt")).state_dict())


def edge_band(obj: torch.Tensor) -> torch.Tensor:
    """1 on pixels within one pixel of the object's outline (per frame), else 0. obj [B,1,F,H,W]."""
    b, _, f, h, w = obj.shape
    m = obj.permute(0, 2, 1, 3, 4).reshape(b * f, 1, h, w)
    band = torch.nn.functional.max_pool2d(m, 3, 1, 1) + torch.nn.functional.max_pool2d(-m, 3, 1, 1)
    return band.reshape(b, f, 1, h, w).permute(0, 2, 1, 3, 4)


def lr_at(step: int, total: int, base: float, warmup: int = 100) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))


@torch.no_grad()
def quick_eval(te: TextEncoder, den: Denoiser, spm_file: Path, cfg: dict, steps: int = 16,
               guidance: float = 4.0, seed: int = 0) -> dict[str, float]:
    """Held-out attribute accuracy of (EMA) weights during training: Euler flow sampling with CFG in
    Python on the held-out prompts and evaluate.py's detector. A progress signal only; the model card
    reports evaluate.py through ``vgen render``."""
    from . import evaluate

    specs = clips.held_out_specs()
    prompts = [sp.prompt for sp in specs]
    ids, mask = spm_tokenize(spm_file, prompts + [""] * len(prompts), cfg["max_length"])
    embeds = te(ids, mask)
    gen = torch.Generator().manual_seed(seed)
    n = len(prompts)
    x = torch.randn((n, 3, cfg["frames"], cfg["size"], cfg["size"]), generator=gen)
    shift = cfg["flow_shift"]
    u = torch.linspace(1.0, 0.0, steps + 1)
    sig = shift * u / (1 + (shift - 1) * u)
    for i in range(steps):
        s = float(sig[i])
        t = torch.full((2 * n,), s * 1000.0)
        flow = den(torch.cat([x, x]), t, embeds)
        cond, unc = flow[:n], flow[n:]
        x = x + (float(sig[i + 1]) - s) * (unc + guidance * (cond - unc))
    hits = {a: 0 for a in evaluate.ATTRS}
    for sp, clip in zip(specs, x.clamp(-1, 1).numpy()):
        ok = evaluate.score(sp, evaluate.analyse(evaluate.clip_to_uint8(clip)))
        for a in hits:
            hits[a] += int(ok[a])
    return {a: round(v / n, 3) for a, v in hits.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="package directory to export at the end")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt", type=Path, default=ROOT / "build" / "vgen-shapes-train" / "ckpt.pt")
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--time-limit-min", type=float, default=0.0, help="stop (and export) after this long")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--stop-at", type=int, default=0, help="stop after this step (lr schedule still --steps)")
    ap.add_argument("--init-from", type=Path, default=None,
                    help="warm start: weights (and EMA) of this checkpoint; new input channels start at zero")
    ap.add_argument("--init-package", type=Path, default=None,
                    help="warm start from an exported package (its tokenizer and weights; EMA starts there too)")
    ap.add_argument("--edge-weight", type=float, default=0.0,
                    help="extra loss weight on pixels along the object's outline (sharp corners and edges)")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--train-only", default="", help="train only the denoiser's parameters with this name prefix")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--eval-every", type=int, default=500, help="held-out accuracy (EMA, Python sampler) every N steps")
    ap.add_argument("--eval-guidance", type=float, default=2.0, help="guidance of that probe (the package default)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = dict(CONFIG)
    spm_file = a.ckpt.parent / "tokenizer.model"
    if a.init_package is not None:
        spm_file.parent.mkdir(parents=True, exist_ok=True)
        spm_file.write_bytes((a.init_package / "tokenizer.model").read_bytes())
    else:
        train_tokenizer(spm_file, a.seed, cfg["vocab_size"])
    import sentencepiece as spm

    vocab = spm.SentencePieceProcessor(model_file=str(spm_file)).vocab_size()
    te, den = build_models(cfg, vocab)
    if a.init_package is not None:
        load_package_weights(a.init_package, te, den)
        print(f"warm start from the package {a.init_package}", flush=True)
    # --train-only PREFIX: fine-tune just the denoiser's parameters under PREFIX (e.g. "refine.");
    # the rest is frozen, so a step runs the frozen part without building its backward graph.
    named = [("te." + n, p) for n, p in te.named_parameters()] + [("den." + n, p) for n, p in den.named_parameters()]
    trainable = {n for n, _ in named if not a.train_only or n.startswith("den." + a.train_only)}
    if not trainable:
        raise SystemExit(f"--train-only {a.train_only!r} matches no parameter")
    for n, p in named:
        p.requires_grad_(n in trainable)
    params = [p for n, p in named if n in trainable]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01, betas=(0.9, 0.99))
    ema_te, ema_den = copy.deepcopy(te).eval(), copy.deepcopy(den).eval()
    start, elapsed_before = 0, 0.0
    if a.resume and a.ckpt.is_file():
        ck = torch.load(a.ckpt, weights_only=False)
        te.load_state_dict(ck["te"]), den.load_state_dict(ck["den"]), opt.load_state_dict(ck["opt"])
        ema_te.load_state_dict(ck["ema_te"]), ema_den.load_state_dict(ck["ema_den"])
        start, elapsed_before = ck["step"], ck.get("train_seconds", 0.0)
        print(f"resumed at step {start}", flush=True)
    if a.init_from is not None:
        ck = torch.load(a.init_from, weights_only=False)
        for mine, key in ((te, "te"), (den, "den"), (ema_te, "ema_te"), (ema_den, "ema_den")):
            state = mine.state_dict()
            for name, value in ck[key].items():
                if state[name].shape == value.shape:
                    state[name] = value
                else:  # conv_in gained coordinate channels: old ones copied, new ones zero
                    state[name] = torch.zeros_like(state[name])
                    state[name][:, : value.shape[1]] = value
            mine.load_state_dict(state)
        print(f"warm start from {a.init_from} (step {ck['step']})", flush=True)
    ema_named = dict([("te." + n, p) for n, p in ema_te.named_parameters()] +
                     [("den." + n, p) for n, p in ema_den.named_parameters()])
    ema_params = [ema_named[n] for n, _ in named if n in trainable]
    # Per-step RNG streams derived from (seed, step): resuming reproduces the same batches.
    t0 = time.perf_counter()
    run_losses: list[float] = []

    def save(step: int) -> None:
        a.ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.ckpt.with_suffix(".tmp")
        torch.save({"te": te.state_dict(), "den": den.state_dict(), "ema_te": ema_te.state_dict(),
                    "ema_den": ema_den.state_dict(), "opt": opt.state_dict(), "step": step, "config": cfg,
                    "vocab": vocab, "seed": a.seed, "batch": a.batch, "steps_planned": a.steps,
                    "train_seconds": elapsed_before + time.perf_counter() - t0,
                    "tokenizer": spm_file.read_bytes()}, tmp)
        tmp.replace(a.ckpt)

    step = start
    for step in range(start, a.steps):
        rng = np.random.default_rng([a.seed, step])
        gen = torch.Generator().manual_seed(a.seed * 1_000_003 + step)
        x0_np, specs = clips.make_batch(rng, a.batch, cfg["frames"], cfg["size"], held_out=False)
        x0 = torch.from_numpy(x0_np)
        prompts = [sp.prompt if rng.random() >= 0.1 else "" for sp in specs]
        ids, mask = spm_tokenize(spm_file, prompts, cfg["max_length"])
        sigma = sample_sigma(a.batch, cfg["flow_shift"], gen)
        s = sigma[:, None, None, None, None]
        noise = torch.randn(x0.shape, generator=gen)
        xt = (1 - s) * x0 + s * noise
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.steps, a.lr, a.warmup)
        embeds = te(ids, mask)
        c_in = 1.0 / torch.sqrt((1.0 - s) ** 2 * 0.5 + s ** 2)
        pred = den.predict_x0(xt * c_in, sigma * 1000.0, embeds)
        bg = x0[:, :, :, :1, :1]
        obj = ((x0 - bg).abs().amax(1, keepdim=True) > 0.05).float()
        w = (1.0 / s).clamp(max=10.0) * (1.0 + 3.0 * obj + a.edge_weight * edge_band(obj))
        loss = (w * (pred - x0) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        decay = min(0.999, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, p in zip(ema_params, params):
                pe.lerp_(p, 1 - decay)
        run_losses.append(loss.item())
        done = step + 1
        if done % a.log_every == 0 or done == a.steps:
            el = elapsed_before + time.perf_counter() - t0
            print(json.dumps({"step": done, "loss": round(float(np.mean(run_losses)), 5),
                              "lr": round(lr_at(step, a.steps, a.lr, a.warmup), 6), "elapsed_s": round(el, 1),
                              "s_per_step": round((time.perf_counter() - t0) / (done - start), 3)}), flush=True)
            run_losses.clear()
        if done % a.ckpt_every == 0 or done == a.steps:
            save(done)
        if a.eval_every and done % a.eval_every == 0:
            te0 = time.perf_counter()
            acc = quick_eval(ema_te, ema_den, spm_file, cfg, guidance=a.eval_guidance)
            print(json.dumps({"step": done, "held_out_accuracy": acc,
                              "eval_s": round(time.perf_counter() - te0, 1)}), flush=True)
        if a.stop_at and done >= a.stop_at:
            save(done)
            break
        if a.time_limit_min and time.perf_counter() - t0 > 60 * a.time_limit_min:
            print(f"time limit reached at step {done}", flush=True)
            save(done)
            break
    total = elapsed_before + time.perf_counter() - t0
    print(f"training finished: {step + 1} steps, {total / 60:.1f} min", flush=True)
    if not a.no_export:
        from .export import export_package

        export_package(a.ckpt, a.out, command=" ".join(["python", "-m", "vgen_demo_model.train", *(argv or sys.argv[1:])]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
