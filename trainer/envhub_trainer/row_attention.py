"""Attention over shared-prompt rows that scores only the keys a row's mask lets each token see.

SDPA runs a shared-prompt row (`shared_prompt.py`) as one dense square: every query scores every key of
the row and the mask throws most of it away. On bench-trl's rows (a prompt of 50 tokens and four
continuations of 32, 178 wide) that is 31,684 scores a head, of which the mask keeps about 9,700. And
with a mask given, HF's SDPA path repeats the grouped keys and values for every query head
(`repeat_kv`) instead of letting SDPA share them.

Here the same attention runs as two SDPA calls: the rows' prompts attend causally to themselves, and
every continuation, gathered into a short row of its own, attends to its prompt's keys and its own
earlier ones; both share grouped keys and values (`enable_gqa`). Each token's softmax is over the same
keys as under the dense mask, so the outputs are the same up to float rounding, and a step of bench-trl's
shape spends about 40% less time in attention (docs/benchmarks.md).

The model reaches this through HF's attention registry: `rows_attention` switches the model's config to
`ATTENTION` for one forward and publishes the rows' layout to the attention function, which falls back to
plain SDPA wherever no layout is published (another thread, or a forward outside the block).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

ATTENTION = "envhub_shared_prompt_rows"
"""The name this attention is registered under in transformers' `AttentionInterface`."""


@dataclass(frozen=True)
class RowLayout:
    """Where each row's prompt and continuations lie, as the index tensors the attention gathers with.

    Flat positions index the (rows x width) tokens of a batch, row-major."""

    rows: int
    width: int
    prompt: int
    """The longest prompt: the prompt pass runs every row's first `prompt` tokens."""
    prompt_mask: torch.Tensor | None
    """(rows, 1, prompt, prompt), causal and within each row's own prompt; None where all are equal."""
    queries: torch.Tensor
    """(segments, longest): flat positions of each continuation's tokens (the last repeated as padding)."""
    keys: torch.Tensor
    """(segments, prompt + longest): its prompt's positions, then its own."""
    continuation_mask: torch.Tensor
    """(segments, 1, longest, prompt + longest): its prompt's tokens, and its own earlier ones."""
    written: torch.Tensor
    """Flat positions of every continuation token, in `queries`' order with padding left out."""
    taken: torch.Tensor
    """Where each of `written` lies in the continuation pass's flattened (segment, token) output."""


def row_layout(
    rows: int,
    width: int,
    prompts: list[int],
    segments: list[tuple[int, int, int]],
    device: torch.device | str = "cpu",
) -> RowLayout:
    """The layout of `rows` rows `width` wide, its tensors on `device`: row r's prompt is its first
    `prompts[r]` tokens, and each (row, start, length) of `segments` is a continuation that sees that
    prompt and itself causally."""
    prompt = max(prompts)
    longest = max((length for _, _, length in segments), default=1)
    causal = torch.ones((max(prompt, longest), max(prompt, longest)), dtype=torch.bool).tril()
    prompt_mask = None
    if min(prompts) != prompt:
        within = torch.arange(prompt)[None, :] < torch.tensor(prompts)[:, None]  # (rows, key)
        prompt_mask = (causal[:prompt, :prompt][None] & within[:, None, :])[:, None]
    queries = torch.zeros((len(segments), longest), dtype=torch.long)
    keys = torch.zeros((len(segments), prompt + longest), dtype=torch.long)
    continuation_mask = torch.zeros((len(segments), 1, longest, prompt + longest), dtype=torch.bool)
    written, taken = [], []
    steps = torch.arange(longest)
    for s, (row, start, length) in enumerate(segments):
        base = row * width
        own = base + start + steps.clamp(max=length - 1)
        queries[s] = own
        keys[s, :prompt] = base + torch.arange(prompt)
        keys[s, prompt:] = own
        continuation_mask[s, 0, :, : prompts[row]] = True
        continuation_mask[s, 0, :length, prompt : prompt + length] = causal[:length, :length]
        continuation_mask[s, 0, length:, prompt : prompt + length] = True  # padding queries: discarded
        written.append(own[:length])
        taken.append(s * longest + steps[:length])
    return RowLayout(
        rows=rows,
        width=width,
        prompt=prompt,
        prompt_mask=None if prompt_mask is None else prompt_mask.to(device),
        queries=queries.to(device),
        keys=keys.to(device),
        continuation_mask=continuation_mask.to(device),
        written=(torch.cat(written) if written else torch.zeros(0, dtype=torch.long)).to(device),
        taken=(torch.cat(taken) if taken else torch.zeros(0, dtype=torch.long)).to(device),
    )


_layout: contextvars.ContextVar[RowLayout | None] = contextvars.ContextVar("envhub_row_layout", default=None)


@contextlib.contextmanager
def rows_attention(model: Any, layout: RowLayout) -> Iterator[None]:
    """Within the block, `model`'s attention over a batch shaped as `layout` (on the model's device)
    runs `attend_rows`."""
    _register()
    config = model.config
    before = config._attn_implementation
    token = _layout.set(layout)
    config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before
        _layout.reset(token)


def attend_rows(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: RowLayout, scale: float | None
) -> torch.Tensor:
    """SDPA over `layout`'s rows: query (rows, heads, width, dim), key and value (rows, kv heads, width,
    dim); returns (rows, width, heads, dim), as HF's attention functions do."""
    rows, heads, width, dim = query.shape
    kv_heads = key.shape[1]
    p = layout.prompt
    prompt_out = F.scaled_dot_product_attention(
        query[:, :, :p],
        key[:, :, :p],
        value[:, :, :p],
        attn_mask=layout.prompt_mask,
        is_causal=layout.prompt_mask is None,
        scale=scale,
        enable_gqa=heads != kv_heads,
    )  # (rows, heads, prompt, dim)

    def tokens(x: torch.Tensor) -> torch.Tensor:  # (rows * width, heads, dim): free where x is a head view
        return x.transpose(1, 2).reshape(rows * width, x.shape[1], dim)

    def gathered(x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:  # (segments, heads, len, dim)
        picked = tokens(x).index_select(0, at.reshape(-1))
        return picked.view(at.shape[0], at.shape[1], x.shape[1], dim).transpose(1, 2)

    continuation_out = F.scaled_dot_product_attention(
        gathered(query, layout.queries),
        gathered(key, layout.keys),
        gathered(value, layout.keys),
        attn_mask=layout.continuation_mask,
        scale=scale,
        enable_gqa=heads != kv_heads,
    )  # (segments, heads, longest, dim)
    out = torch.cat([prompt_out.transpose(1, 2), query.new_zeros(rows, width - p, heads, dim)], dim=1)
    flat = continuation_out.transpose(1, 2).reshape(-1, heads, dim).index_select(0, layout.taken)
    return (
        out.reshape(rows * width, heads, dim)
        .index_copy(0, layout.written, flat)
        .view(rows, width, heads, dim)
    )


def _attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """HF's attention-function signature; plain SDPA where no layout is published for this forward."""
    layout = _layout.get()
    plain = dropout == 0 and not any(v not in (None, False) for k, v in kwargs.items() if k not in _PLAIN)
    if layout is None or not plain or query.shape[0] != layout.rows or key.shape[2] != layout.width:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    return attend_rows(query, key, value, layout, scaling), None


_PLAIN = {"position_ids", "is_causal", "use_cache", "cache_position", "output_attentions"}
"""Keyword arguments that leave attention plain softmax(q k^T scale + mask) v. Any other one set (a
sliding window, a logit soft cap, attention sinks, a position bias) runs HF's SDPA path as it would."""


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # not used: the rows' mask is 4-D already
