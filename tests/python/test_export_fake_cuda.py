"""torch.export for CUDA, checked on a machine without a GPU (vgen_export.aoti.check_exports,
`python -m vgen_export.wan_compile --device cuda --export-only`).

The GPU check's compiled phase exports the transformer on the card, and run 3 (H200, 2026-11-28)
lost that whole phase there: on CUDA torch.export guards a one-row text context away (`text !=
1`), which the declared range 1..513 violated, while the CPU export was fine. Device minutes are
scarce, so the CUDA export is traced here on fake tensors (shapes and the device's dispatch, no
memory, no kernels): this test fails on that range, and passes on the one the exporter declares
now (text from 2 rows; the runtime's compact context always has at least 2)."""

from __future__ import annotations

import pytest
import torch

from vgen_export.wan21_1_3b import TRANSFORMER_CONFIG
from vgen_export.wan_compile import compile_wan_transformer, main


def real_width_transformer():
    """Wan 2.1 T2V 1.3B's published config at 2 of its 30 layers: export's guards come from the
    shapes, the dtype and the device's dispatch, which every layer shares (random weights, bf16)."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    return WanTransformer3DModel(**{**TRANSFORMER_CONFIG, "num_layers": 2}).to(torch.bfloat16).eval()


def test_the_gpu_checks_transformer_exports_for_cuda_without_a_gpu(tmp_path):
    report = compile_wan_transformer(real_width_transformer(), tmp_path / "t.cuda.pt2", torch.bfloat16, "cuda",
                                     export_only=True)
    assert report["device"] == "cuda"
    assert report["exported"] == ["forward", "forward_compact"]
    assert not list(tmp_path.iterdir())  # nothing written
    for method, ranges in report["ranges"].items():
        # the text rows keep the declared range 2..513 (pipeline_max_sequence_length + 1), the batch rows 1..256
        assert [2, 513] in ranges.values(), (method, ranges)
        assert [1, 256] in ranges.values(), (method, ranges)


def test_a_range_the_cuda_export_narrows_is_refused_naming_the_method_and_the_guard(tmp_path, monkeypatch):
    real_dim = torch.export.Dim

    def text_from_one_row(name, *, min=None, max=None):  # noqa: A002 - torch.export.Dim's own names
        return real_dim(name, min=1 if name == "text" else min, max=max)

    monkeypatch.setattr(torch.export, "Dim", text_from_one_row)
    with pytest.raises(RuntimeError) as err:
        compile_wan_transformer(real_width_transformer(), tmp_path / "t.cuda.pt2", torch.bfloat16, "cuda",
                                methods=["forward_compact"], export_only=True)
    message = str(err.value)
    assert "torch.export of method 'forward_compact' failed" in message
    assert "Constraints violated (text)" in message and "!= 1" in message


def test_the_command_wants_an_output_unless_it_only_exports(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--diffusers", "d", "--package", "p", "--device", "cuda"])
    assert done.value.code == 2
    assert "--out is required, except with --export-only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["--diffusers", "d", "--package", "p", "--out", "o", "--export-only"])
    assert done.value.code == 2
