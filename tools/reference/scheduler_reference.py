#!/usr/bin/env python3
"""Reference trajectories from diffusers' schedulers, for the C++ parity test.

Writes JSON: for each case (scheduler class, config, number of steps) the timesteps and
sigmas after set_timesteps, init_noise_sigma, a seeded sample, one fixed model output per
step, and, in float64 and float32, the scaled model input and the step output of every step.
Model outputs do not depend on the trajectory, so a C++ run can replay them exactly.

Usage: python -m vgen_reference.scheduler_reference --out FILE   (about a second on one CPU core)
"""
import argparse
import json
import sys

import torch
import diffusers

SAMPLE_SHAPE = [1, 2, 3, 4]

WAN_UNIPC = {  # Wan 2.1 T2V Diffusers scheduler_config.json (480p: flow_shift 3.0)
    "num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
    "trained_betas": None, "solver_order": 2, "prediction_type": "flow_prediction",
    "thresholding": False, "dynamic_thresholding_ratio": 0.995, "sample_max_value": 1.0,
    "predict_x0": True, "solver_type": "bh2", "lower_order_final": True, "disable_corrector": [],
    "solver_p": None, "use_karras_sigmas": False, "use_exponential_sigmas": False,
    "use_beta_sigmas": False, "use_flow_sigmas": True, "flow_shift": 3.0,
    "timestep_spacing": "linspace", "steps_offset": 0, "final_sigmas_type": "zero",
    "rescale_betas_zero_snr": False,
}

LTX_FLOW = {  # LTX-Video 0.9.x scheduler_config.json, driven by LTXPipeline
    "num_train_timesteps": 1000, "shift": 1.0, "use_dynamic_shifting": True, "base_shift": 0.95,
    "max_shift": 2.05, "base_image_seq_len": 1024, "max_image_seq_len": 4096, "shift_terminal": 0.1,
    "time_shift_type": "exponential", "sigma_schedule": "one_to_one_over_n",
}
# vgen parameters that stand for a pipeline's set_timesteps arguments (not diffusers config keys).
PIPELINE_KEYS = ("sigma_schedule", "image_seq_len")

# (case name, diffusers class, config, num_inference_steps, generator seed or None)
CASES = [
    ("flow_wan_shift5", "FlowMatchEulerDiscreteScheduler",
     {"num_train_timesteps": 1000, "shift": 5.0}, 10, None),
    ("flow_shift3", "FlowMatchEulerDiscreteScheduler", {"shift": 3.0}, 7, None),
    ("flow_shift1", "FlowMatchEulerDiscreteScheduler", {}, 5, None),
    ("flow_shift_terminal", "FlowMatchEulerDiscreteScheduler",
     {"shift": 2.0, "shift_terminal": 0.1, "num_train_timesteps": 500}, 6, None),
    ("flow_invert_sigmas", "FlowMatchEulerDiscreteScheduler",
     {"shift": 3.0, "invert_sigmas": True}, 4, None),
    ("flow_stochastic", "FlowMatchEulerDiscreteScheduler",
     {"shift": 3.0, "stochastic_sampling": True}, 5, 1234),
    # LTXPipeline: its own sigmas linspace(1, 1/n, n) and mu from the latent sequence length
    # ("sigma_schedule" and "image_seq_len" are vgen's parameters for those two inputs).
    ("flow_ltx_dynamic", "FlowMatchEulerDiscreteScheduler", dict(LTX_FLOW, image_seq_len=4 * 16 * 22), 8, None),
    ("flow_ltx_dynamic_small", "FlowMatchEulerDiscreteScheduler", dict(LTX_FLOW, image_seq_len=12), 3, None),
    ("flow_ltx_linear", "FlowMatchEulerDiscreteScheduler",
     dict(LTX_FLOW, image_seq_len=2000, time_shift_type="linear", shift_terminal=None), 5, None),
    ("flow_ltx_static_shift", "FlowMatchEulerDiscreteScheduler",
     {"shift": 3.3, "sigma_schedule": "one_to_one_over_n"}, 6, None),
    # HunyuanVideo15Pipeline: its own sigmas linspace(1, 0, n + 1)[:-1], the config's fixed shift.
    ("flow_hunyuan15", "FlowMatchEulerDiscreteScheduler",
     {"num_train_timesteps": 1000, "shift": 5.0, "sigma_schedule": "one_to_zero"}, 7, None),
    ("flow_hunyuan15_shift7", "FlowMatchEulerDiscreteScheduler",
     {"shift": 7.0, "sigma_schedule": "one_to_zero"}, 3, None),
    ("unipc_wan480", "UniPCMultistepScheduler", WAN_UNIPC, 10, None),
    ("unipc_wan720_order3", "UniPCMultistepScheduler",
     dict(WAN_UNIPC, flow_shift=5.0, solver_order=3), 8, None),
    ("unipc_flow_bh1_noneq", "UniPCMultistepScheduler",
     dict(WAN_UNIPC, solver_type="bh1", lower_order_final=False, disable_corrector=[2],
          final_sigmas_type="sigma_min"), 6, None),
    ("unipc_epsilon", "UniPCMultistepScheduler", {}, 8, None),
    ("unipc_eps_scaled_trailing_v", "UniPCMultistepScheduler",
     {"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012,
      "timestep_spacing": "trailing", "prediction_type": "v_prediction"}, 6, None),
    ("unipc_eps_leading_noX0", "UniPCMultistepScheduler",
     {"timestep_spacing": "leading", "steps_offset": 1, "predict_x0": False, "solver_order": 3,
      "final_sigmas_type": "sigma_min"},
     7, None),
    ("ddim_default", "DDIMScheduler", {}, 10, None),
    ("ddim_sd_trailing_v", "DDIMScheduler",
     {"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012,
      "clip_sample": False, "set_alpha_to_one": False, "steps_offset": 1,
      "timestep_spacing": "trailing", "prediction_type": "v_prediction"}, 8, None),
    ("ddim_linspace_eta", "DDIMScheduler",
     {"timestep_spacing": "linspace", "eta": 0.5}, 5, 42),
    ("ddim_cosine_sample", "DDIMScheduler",
     {"beta_schedule": "squaredcos_cap_v2", "prediction_type": "sample", "clip_sample_range": 2.0},
     6, None),
    ("euler_linspace", "EulerDiscreteScheduler", {}, 10, None),
    ("euler_sd_leading", "EulerDiscreteScheduler",
     {"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012,
      "timestep_spacing": "leading", "steps_offset": 1, "final_sigmas_type": "sigma_min"}, 8, None),
    ("euler_trailing_v", "EulerDiscreteScheduler",
     {"timestep_spacing": "trailing", "prediction_type": "v_prediction"}, 7, None),
]

# Arguments of step() that vgen takes as scheduler parameters instead.
STEP_KWARGS = {"DDIMScheduler": ["eta"]}


def run_case(cls_name, config, steps, seed, sample, model_outputs, dtype):
    config = dict(config)
    step_kwargs = {k: config.pop(k) for k in STEP_KWARGS.get(cls_name, []) if k in config}
    pipeline = {k: config.pop(k) for k in PIPELINE_KEYS if k in config}
    sched = getattr(diffusers, cls_name).from_config(config)
    if pipeline.get("sigma_schedule") == "one_to_one_over_n":  # as LTXPipeline.__call__ does
        import numpy as np

        # mu on the line through (base_image_seq_len, base_shift) and (max_image_seq_len, max_shift),
        # in Python floats as LTXPipeline computes it (importing the pipeline module costs ~5 s).
        c = sched.config
        lo, hi = c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096)
        slope = (c.get("max_shift", 1.15) - c.get("base_shift", 0.5)) / (hi - lo)
        mu = pipeline.get("image_seq_len", 0) * slope + (c.get("base_shift", 0.5) - slope * lo)
        sched.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    elif pipeline.get("sigma_schedule") == "one_to_zero":  # as HunyuanVideo15Pipeline.__call__ does
        import numpy as np

        sched.set_timesteps(sigmas=np.linspace(1.0, 0.0, steps + 1)[:-1])
    else:
        sched.set_timesteps(steps)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    x = torch.tensor(sample, dtype=dtype).reshape(SAMPLE_SHAPE)
    scaled, outs = [], []
    for i, t in enumerate(sched.timesteps):
        # FlowMatchEuler has no scale_model_input: the model sees the sample unchanged.
        x_in = sched.scale_model_input(x, t) if hasattr(sched, "scale_model_input") else x
        scaled.append(x_in.flatten().tolist())
        mo = torch.tensor(model_outputs[i], dtype=dtype).reshape(SAMPLE_SHAPE)
        kwargs = dict(step_kwargs)
        if generator is not None:
            kwargs["generator"] = generator
        x = sched.step(mo, t, x, **kwargs).prev_sample
        assert x.dtype == dtype, (cls_name, x.dtype)
        outs.append(x.flatten().tolist())
    return sched, scaled, outs


def build_cases():
    gen = torch.Generator().manual_seed(20240601)
    n = 1
    for d in SAMPLE_SHAPE:
        n *= d
    cases = []
    for name, cls_name, config, steps, seed in CASES:
        sample = torch.randn(n, generator=gen, dtype=torch.float64).tolist()
        model_outputs = [torch.randn(n, generator=gen, dtype=torch.float64).tolist()
                         for _ in range(steps)]
        case = {"name": name, "scheduler": cls_name, "params": config,
                "num_inference_steps": steps, "seed": seed, "sample_shape": SAMPLE_SHAPE,
                "sample": sample, "model_outputs": model_outputs, "results": {}}
        for dtype_name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
            sched, scaled, outs = run_case(cls_name, config, steps, seed, sample, model_outputs, dtype)
            case["results"][dtype_name] = {"scaled_inputs": scaled, "steps": outs}
        case["timesteps"] = sched.timesteps.tolist()
        case["timesteps_dtype"] = str(sched.timesteps.dtype).replace("torch.", "")
        case["sigmas"] = sched.sigmas.tolist() if hasattr(sched, "sigmas") else []
        case["init_noise_sigma"] = float(getattr(sched, "init_noise_sigma", 1.0))
        cases.append(case)
    return cases


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    doc = {"diffusers_version": diffusers.__version__, "torch_version": torch.__version__,
           "cases": build_cases()}
    with open(args.out, "w") as f:
        json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
