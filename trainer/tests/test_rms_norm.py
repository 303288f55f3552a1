"""The hand-derived RMSNorm takes over only norms that compute its formula, and gives their values and
gradients."""

from __future__ import annotations

import pytest
import torch
from envhub_trainer.rms_norm import behaves_as_rms_norm, fused_norms
from torch import nn
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm


def values_and_gradients(module: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    x = x.detach().requires_grad_()
    weight = module.weight
    assert isinstance(weight, torch.Tensor)
    out = module(x)
    grads = torch.autograd.grad(
        (out * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum(), [x, weight]
    )
    return [out.detach(), *grads]


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-6), (torch.float32, 1e-5)])
def test_a_llama_norm_is_taken_over_with_the_same_values_and_gradients(
    dtype: torch.dtype, tolerance: float
) -> None:
    torch.manual_seed(0)
    norm = LlamaRMSNorm(48, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(2, 7, 48, dtype=dtype) * 4
    theirs = values_and_gradients(norm, x)
    with fused_norms(norm) as taken:
        assert taken == 1
        assert "forward" in vars(norm)
        ours = values_and_gradients(norm, x)
    assert "forward" not in vars(norm)  # itself again after the block
    for want, have in zip(theirs, ours, strict=True):
        assert torch.allclose(have, want, rtol=tolerance, atol=tolerance)


def test_norms_of_another_formula_keep_their_forward() -> None:
    torch.manual_seed(0)
    gemma = GemmaRMSNorm(48, eps=1e-6)  # weight * (1 + w): a different formula under the same name
    with torch.no_grad():
        gemma.weight.normal_()
    layer_norm = nn.LayerNorm(48)  # a weight of one axis and an eps, but centred
    with fused_norms(nn.ModuleList([gemma, layer_norm])) as taken:
        assert taken == 0
    assert not behaves_as_rms_norm(gemma) and not behaves_as_rms_norm(layer_norm)
    assert behaves_as_rms_norm(nn.RMSNorm(48, eps=1e-6))  # torch's own computes the same formula
    assert not behaves_as_rms_norm(nn.RMSNorm(48, eps=1e-6, dtype=torch.float64))  # but not in float32
