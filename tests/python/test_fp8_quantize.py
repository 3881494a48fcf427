"""The fp8 Linear's activation quantisation (tools/vgen_export/quantize.py, quantize_rows_e4m3),
which the exported fp8 transformer runs on CUDA before torch._scaled_mm. The GEMM itself cannot
run on this CPU; the quantisation can, and it is where the scripted module's CUDA branch is
written for fewer bytes. The branch itself runs here on fake CUDA tensors, where _scaled_mm's
own rules (layouts, dtypes, scale shapes) are checked as on a card. Checked here against a float64 reference, on inputs made to break it:
an e4m3fn cast of anything above 448 is NaN, and a wrong scale shows as a large error."""
from __future__ import annotations

import pytest
import torch

from vgen_export.quantize import Fp8Linear, quantize_rows_e4m3

# e4m3: 3 stored mantissa bits, so a normal value rounds within half a step: relative 2^-4.
E4M3_REL = 2.0 ** -4
E4M3_MIN_NORMAL = 2.0 ** -6


def check(rows: torch.Tensor):
    q, scale = torch.jit.script(quantize_rows_e4m3)(rows)
    assert q.dtype == torch.float8_e4m3fn and q.shape == rows.shape
    assert scale.dtype == torch.float32 and scale.shape == (rows.shape[0], 1)
    qf = q.double()
    assert torch.isfinite(qf).all(), "a NaN from the cast: a value above 448 reached it"
    assert qf.abs().max() <= 448.0
    ref = rows.double()
    amax = ref.abs().amax(dim=1, keepdim=True)
    # the scale is the row's amax / 448 (from the input dtype's exact maximum)
    assert torch.allclose(scale.double(), (amax / 448.0).clamp(min=1e-12), rtol=1e-6, atol=0)
    back = qf * scale.double()
    # where x / scale is a normal e4m3 value: relative error within one rounding of e4m3 plus the
    # activation dtype's rounding of the product (bf16: 2^-8) and of the reciprocal
    normal = (ref.abs() / scale.double()) >= E4M3_MIN_NORMAL
    dtype_rel = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}[rows.dtype]
    rel = ((back - ref).abs() / ref.abs().clamp(min=1e-300))[normal]
    assert rel.numel() == 0 or rel.max() <= E4M3_REL + 3 * dtype_rel, float(rel.max())
    # below that, an absolute error of at most half an e4m3 subnormal step (2^-10) times the scale
    sub = ~normal
    if sub.any():
        err = (back - ref).abs() / scale.double()
        assert err[sub].max() <= 2.0 ** -10 + 1e-12
    return q, scale


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_random_rows_within_e4m3_rounding(dtype):
    gen = torch.Generator().manual_seed(7)
    rows = (torch.randn(64, 256, generator=gen) * torch.logspace(-3, 3, 64).unsqueeze(1)).to(dtype)
    check(rows)


def test_adversarial_rows_never_overflow_to_nan():
    big = torch.finfo(torch.bfloat16).max
    rows = torch.zeros(8, 32, dtype=torch.bfloat16)
    rows[1] = 3.0  # constant row: every value is the row's maximum, x / scale = 448 exactly
    rows[2, 5] = big  # one huge value beside zeros
    rows[3] = -torch.linspace(1, 2, 32)  # the maximum is negative
    rows[4] = torch.tensor(447.9).to(torch.bfloat16)  # values near 448 themselves
    rows[5, :16] = 1e-30  # tiny beside...
    rows[5, 16:] = 1.0  # ...ordinary ones: the tiny ones go to zero, not to NaN
    rows[6] = torch.linspace(-1e4, 1e4, 32)
    rows[7, 0] = 1e-38  # a row of one subnormal-ish value: the scale's floor
    q, scale = check(rows)
    assert (q[0].float() == 0).all() and (q[5, :16].float() == 0).all()
    assert (q[1].float() == 448.0).all()


def test_every_bf16_magnitude_as_a_row_maximum_stays_finite():
    # Each bf16 value from 2^-12 to 2^12 (both signs) as the maximum of its own row, beside values
    # just under it: x / scale is rounded twice in bf16 and may land above 448; the cast must
    # still give a finite value no larger than 448 (no clamp is applied before it).
    bits = torch.arange(0x3980, 0x4580, dtype=torch.int32).to(torch.int16)  # 2^-12 .. 2^12
    top = bits.view(torch.bfloat16)
    rows = torch.stack([top, torch.nextafter(top.float(), torch.zeros(())).to(torch.bfloat16), -top], dim=1)
    q, _ = check(rows)
    assert q.float().abs().max() == 448.0


def test_the_cpu_path_is_the_dequantized_linear():
    gen = torch.Generator().manual_seed(3)
    lin = torch.nn.Linear(64, 48)
    m = torch.jit.script(Fp8Linear(lin, torch.float32))
    x = torch.randn(2, 5, 64, generator=gen)
    w = m.weight.float() * m.scale.unsqueeze(1)
    assert torch.equal(m(x), torch.nn.functional.linear(x, w, m.bias))
    # and the fp8 weights are the float ones within e4m3's rounding per output channel
    assert ((w - lin.weight).abs() <= lin.weight.abs() * E4M3_REL + m.scale.unsqueeze(1) * 2.0 ** -10).all()


class ScaledMmCalls(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the aten ops a call reaches (below a FakeTensorMode: only their names)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(7, 64), (2, 5, 64), (2, 3, 4, 64)])
def test_the_cuda_branch_meets_scaled_mms_rules_on_fake_cuda_tensors(act_dtype, shape):
    """The scripted module's CUDA branch, run on fake CUDA tensors (torch's FakeTensorMode: no GPU,
    the CUDA dispatch and _scaled_mm's own checks of layout, dtypes and scale shapes): it reaches
    _scaled_mm with a row-major e4m3 activation, the column-major weight and float32 scales, and
    returns the activation's dtype and shape. A weight passed row-major fails here ("mat2 must be
    col_major"), as it would on the card."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    lin = torch.nn.Linear(64, 96)
    m = torch.jit.script(Fp8Linear(lin, act_dtype))
    x = torch.randn(*shape).to(act_dtype)
    with FakeTensorMode(allow_non_fake_inputs=True):
        mc = m.to("cuda")
        with ScaledMmCalls() as calls:
            y = mc(x.to("cuda"))
        assert y.device.type == "cuda" and y.dtype == act_dtype and tuple(y.shape) == (*shape[:-1], 96)
        assert "aten._scaled_mm" in calls.ops, calls.ops
        with pytest.raises(RuntimeError, match="col_major"):
            torch._scaled_mm(x.reshape(-1, 64).to("cuda").to(torch.float8_e4m3fn), mc.weight,
                             scale_a=torch.ones(x.numel() // 64, 1, device="cuda"), scale_b=mc.scale.unsqueeze(0),
                             out_dtype=torch.bfloat16)


def test_a_linear_whose_sizes_tensor_cores_cannot_take_stays_dequantized_on_cuda():
    from torch._subclasses.fake_tensor import FakeTensorMode

    m = torch.jit.script(Fp8Linear(torch.nn.Linear(40, 96), torch.bfloat16))  # 40: not a multiple of 16
    assert not m.tensor_cores
    with FakeTensorMode(allow_non_fake_inputs=True):
        mc = m.to("cuda")
        with ScaledMmCalls() as calls:
            y = mc(torch.randn(3, 40).to(torch.bfloat16).to("cuda"))
        assert tuple(y.shape) == (3, 96) and "aten._scaled_mm" not in calls.ops, calls.ops
