"""Gradients accumulated where they are computed: the weight gradient of every linear layer is added
into `weight.grad` by its own matrix multiply (`addmm_`), and the embedding's into the rows it used.

A step trains on several micro-batches. Autograd computes each micro-batch's weight gradients into
fresh tensors and then adds them to `.grad`: for SmolLM2-135M that is a new 540 MB of gradients and
a pass over 1.6 GB (read both, write one) per micro-batch after the first. The embedding is worse: its
backward fills a dense vocabulary x hidden zero matrix (113 MB) to scatter a few hundred rows into,
then adds all of it to the gradient it shares with the tied LM head. Here the weight-gradient GEMM
writes into `.grad` directly (beta = 1), and the embedding adds only its rows, as Megatron's
"gradient accumulation fusion" does on GPU. The sums are the same; only float rounding order
changes (one accumulate instead of a separate add).

Only for a model trained by this process alone: data-parallel training (DDP, FSDP2) reduces gradients
from autograd's accumulation hooks, which this path does not run, so the trainer turns it off there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from envhub_trainer.replaced_forwards import replaceable, replaced_forwards


class _Gradients:
    """Writes weight gradients into `.grad`. A gradient left from the step before is stale: the step's
    first write overwrites it in place (`mm(out=)`, `zero_()`) instead of freeing and allocating it."""

    def __init__(self) -> None:
        self.stale: set[int] = set()

    def _first(self, parameter: torch.Tensor) -> bool:
        """Whether `parameter.grad` holds the last step's values (and is about to be overwritten)."""
        if parameter.grad is not None and id(parameter) in self.stale:
            self.stale.discard(id(parameter))
            return True
        return False

    def add_mm(self, parameter: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> None:
        """parameter.grad += left @ right, in one GEMM (beta = 1)."""
        grad = parameter.grad
        if grad is None:
            parameter.grad = torch.mm(left, right).to(parameter.dtype)
        elif self._first(parameter):
            torch.mm(left.to(grad.dtype), right.to(grad.dtype), out=grad)
        else:
            grad.addmm_(left.to(grad.dtype), right.to(grad.dtype))

    def add(self, parameter: torch.Tensor, value: torch.Tensor) -> None:
        grad = parameter.grad
        if grad is None:
            parameter.grad = value.to(parameter.dtype).clone()
        elif self._first(parameter):
            grad.copy_(value)
        else:
            grad.add_(value)

    def add_rows(self, parameter: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> None:
        """parameter.grad[ids] += rows (repeated ids add up)."""
        grad = parameter.grad
        if grad is None:
            parameter.grad = grad = torch.zeros_like(parameter)
        elif self._first(parameter):
            grad.zero_()
        grad.index_add_(0, ids, rows.to(grad.dtype))


class _Linear(torch.autograd.Function):
    """y = x W^T + b; backward returns the input's gradient and adds W's (and b's) into their .grad."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, grads: _Gradients
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.bias, ctx.grads = bias, grads
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:
        x, weight = ctx.saved_tensors
        grad_x = grad_out @ weight if ctx.needs_input_grad[0] else None
        rows = grad_out.reshape(-1, grad_out.shape[-1])
        if weight.requires_grad:
            ctx.grads.add_mm(weight, rows.t(), x.reshape(-1, x.shape[-1]))
        bias = ctx.bias
        if bias is not None and bias.requires_grad:
            ctx.grads.add(bias, rows.sum(0))
        return grad_x, None, None, None


class _Embedding(torch.autograd.Function):
    """Row lookup; backward adds each used row's gradient into weight.grad (padding_idx rows get none)."""

    @staticmethod
    def forward(
        ctx: Any, ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None, grads: _Gradients
    ) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.weight, ctx.padding_idx, ctx.grads = weight, padding_idx, grads
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[None, None, None, None]:
        (ids,) = ctx.saved_tensors
        if ctx.weight.requires_grad:
            flat_ids = ids.reshape(-1)
            rows = grad_out.reshape(-1, grad_out.shape[-1])
            if ctx.padding_idx is not None:
                keep = flat_ids != ctx.padding_idx
                flat_ids, rows = flat_ids[keep], rows[keep]
            ctx.grads.add_rows(ctx.weight, flat_ids, rows)
        return None, None, None, None


def _linear_forward(module: nn.Linear, grads: _Gradients) -> Any:
    def forward(x: torch.Tensor) -> torch.Tensor:
        return _Linear.apply(x, module.weight, module.bias, grads)  # type: ignore[no-any-return,no-untyped-call]

    return forward


def _embedding_forward(module: nn.Embedding, grads: _Gradients) -> Any:
    def forward(ids: torch.Tensor) -> torch.Tensor:
        return _Embedding.apply(ids, module.weight, module.padding_idx, grads)  # type: ignore[no-any-return,no-untyped-call]

    return forward


def _plain(module: nn.Module) -> bool:
    """Modules whose forward is exactly the textbook one (no max_norm, no sparse grads, no hooks)."""
    if type(module) is nn.Linear:
        return True
    if type(module) is nn.Embedding:
        return module.max_norm is None and not module.sparse and not module.scale_grad_by_freq
    return False


@contextlib.contextmanager
def fused_accumulation(model: Any, *, enabled: bool = True) -> Iterator[bool]:
    """Within the block the model's linear and embedding layers accumulate their weight gradients in
    place (see the module docstring); yields whether they do. Not `enabled`, or a model that is not a
    plain `nn.Module` (DDP), is left as it is.

    The block starts a step's gradients (it replaces `optimizer.zero_grad()`): the gradients of those
    layers are kept and overwritten by their first write (no 540 MB freed and page-faulted back in
    each step), every other parameter's is cleared, and one the step never wrote is None at the end."""
    if (
        not enabled
        or not isinstance(model, nn.Module)
        or isinstance(model, nn.parallel.DistributedDataParallel)
    ):
        yield False
        return
    grads = _Gradients()
    patched = {
        module: _linear_forward(module, grads)
        if isinstance(module, nn.Linear)
        else _embedding_forward(module, grads)  # type: ignore[arg-type]
        for module in model.modules()
        if _plain(module) and replaceable(module)
    }
    shared = {id(p) for m in model.modules() if m not in patched for p in m.parameters(recurse=False)}
    kept = {id(p): p for m in patched for p in m.parameters(recurse=False) if id(p) not in shared}
    for parameter in model.parameters():
        if id(parameter) in kept and parameter.grad is not None:
            grads.stale.add(id(parameter))
        else:
            parameter.grad = None
    try:
        with replaced_forwards(patched):
            yield True
    finally:
        for key in grads.stale:  # never written this step: no gradient, as after zero_grad()
            kept[key].grad = None
