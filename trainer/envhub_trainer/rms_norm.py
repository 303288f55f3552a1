"""RMSNorm forward and backward in fewer passes over the activations than autograd's op-by-op graph.

HF's RMSNorm is six small operators, and autograd's backward of them about ten more, each a pass over a
(tokens x hidden) tensor with its own dispatch. A decoder runs two a layer, so bench-trl's step runs 244
of them forward and backward. `_RMSNorm` computes the same formula (in float32, cast back, as HF does)
with a backward derived by hand: about 35% less time for those norms alone, measured in
docs/benchmarks.md.

A module is taken over only when it behaves as that formula: `fused_norms` runs its own forward on a
probe input and compares. A norm with another formula (Gemma's 1 + weight, a centred LayerNorm, an
offset) fails the probe and keeps its forward. The probe runs once per module per process.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from envhub_trainer.replaced_forwards import replaceable, replaced_forwards

_VERDICTS: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()
"""Whether each module seen so far computes the RMSNorm formula (its probe's result)."""


class _RMSNorm(torch.autograd.Function):
    """weight * (x * rsqrt(mean(x^2) + eps)), the normalisation in float32 whatever x's dtype, as HF's
    Llama-family norms compute it."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        wide = x.to(torch.float32)
        r = torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
        normed = (wide * r).to(x.dtype)
        ctx.save_for_backward(wide, r, weight)
        return weight * normed

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        wide, r, weight = ctx.saved_tensors
        normed = wide * r
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad * normed.to(grad.dtype)).reshape(-1, grad.shape[-1]).sum(0).to(weight.dtype)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_normed = (grad * weight).to(wide.dtype)
            dot = (grad_normed * normed).mean(-1, keepdim=True)
            grad_x = torch.addcmul(grad_normed, normed, dot, value=-1).mul_(r).to(grad.dtype)
        return grad_x, grad_weight, None


def _epsilon(module: nn.Module) -> float | None:
    for name in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(module, name, None)
        if isinstance(value, float):
            return value
    return None


def behaves_as_rms_norm(module: nn.Module) -> bool:
    """Whether `module(x)` is `_RMSNorm` of x with its weight and epsilon, on a probe input."""
    if module in _VERDICTS:
        return _VERDICTS[module]
    weight, eps = getattr(module, "weight", None), _epsilon(module)
    verdict = False
    if (
        isinstance(weight, torch.Tensor)
        and weight.ndim == 1
        and eps is not None
        and not list(module.children())
    ):
        probe = torch.randn((3, weight.shape[0]), generator=torch.Generator().manual_seed(0)) * 3 + 1
        probe = probe.to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            try:
                theirs = module(probe)
            except Exception:  # a module that takes other arguments is not a plain norm
                theirs = None
            ours = _RMSNorm.apply(probe, weight, eps)  # type: ignore[no-untyped-call]
        tolerance = 4 * torch.finfo(weight.dtype).eps
        verdict = isinstance(theirs, torch.Tensor) and torch.allclose(
            theirs, ours, rtol=tolerance, atol=tolerance
        )
    _VERDICTS[module] = verdict
    return verdict


@contextlib.contextmanager
def fused_norms(model: Any, *, enabled: bool = True) -> Iterator[int]:
    """Within the block the model's RMSNorm modules run `_RMSNorm`; yields how many do."""
    forwards: dict[nn.Module, Any] = {}
    if enabled and isinstance(model, nn.Module):
        forwards = {
            module: _forward(module, _epsilon(module))
            for module in model.modules()
            if replaceable(module) and behaves_as_rms_norm(module)
        }
    with replaced_forwards(forwards):
        yield len(forwards)


def _forward(module: nn.Module, eps: float | None) -> Any:
    def forward(x: torch.Tensor) -> torch.Tensor:
        return _RMSNorm.apply(x, module.weight, eps)  # type: ignore[no-any-return,no-untyped-call]

    return forward
