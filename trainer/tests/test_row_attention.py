"""Attention by rows gives what dense SDPA under the rows' mask gives: outputs and gradients."""

from __future__ import annotations

import pytest
import torch
from envhub_trainer.row_attention import attend_rows, row_layout
from envhub_trainer.shared_prompt import row_mask
from torch.nn import functional as F


@pytest.mark.parametrize(
    ("prompts", "lengths"),
    [
        ([5, 5], [[3, 4, 1], [2, 2]]),  # equal prompts: the prompt pass is plain causal
        ([2, 6, 4], [[7], [1, 3, 5], [4, 4]]),  # uneven prompts, continuations and padding
    ],
)
def test_rows_attend_as_dense_sdpa_under_the_mask(prompts: list[int], lengths: list[list[int]]) -> None:
    torch.manual_seed(0)
    width = max(p + sum(ns) for p, ns in zip(prompts, lengths, strict=True))
    segments = []
    for r, (p, ns) in enumerate(zip(prompts, lengths, strict=True)):
        start = p
        for n in ns:
            segments.append((r, start, n))
            start += n
    rows, heads, kv_heads, dim = len(prompts), 6, 2, 8
    q = torch.randn(rows, heads, width, dim, dtype=torch.float64, requires_grad=True)
    k = torch.randn(rows, kv_heads, width, dim, dtype=torch.float64, requires_grad=True)
    v = torch.randn(rows, kv_heads, width, dim, dtype=torch.float64, requires_grad=True)
    mask = row_mask(rows, width, prompts, segments)[:, None]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    got = attend_rows(q, k, v, row_layout(rows, width, prompts, segments), scale=None)
    real = torch.zeros((rows, width), dtype=torch.bool)  # padding's output is nobody's input
    for r, start, n in segments:
        real[r, start : start + n] = True
    for r, p in enumerate(prompts):
        real[r, :p] = True
    assert torch.allclose(got[real], expected[real], atol=1e-12)
    weight = torch.randn_like(expected) * real[:, :, None, None]
    grads = torch.autograd.grad((expected * weight).sum(), (q, k, v))
    ours = torch.autograd.grad((got * weight).sum(), (q, k, v))
    for want, have in zip(grads, ours, strict=True):
        assert torch.allclose(have, want, atol=1e-12)
