"""A group's samples share their prompt: run it through the model once per row, not once per sample.

GRPO samples G completions of one prompt, and on short tasks the prompt is most of each sequence
(bench-trl: about 56 of 80 tokens). A shared-prompt row holds the prompt once, then each sample's
continuation after it. A 4-D attention mask lets a continuation see the prompt and its own earlier
tokens only, and its position ids go on from the prompt's, so every trained token's logprob is the one a
row of its own gives. The prompt's forward and backward run once, and its gradient is the sum of what
each continuation sends back to it, which is what separate rows add up to. Same loss, same update (up to
float rounding), about half the tokens through the model on bench-trl's task.

The prompt is a sample's tokens before its first trained token: samples whose prompts are equal token
for token share a row (a task's G episodes; later pieces of a split multi-turn episode carry their
whole history as prompt and share only if that history is equal too). The mask is dense over the row
(and so is eager attention; SDPA runs `row_attention`, which scores only the keys it allows), so a row
stops taking samples at `ROW_TOKENS` tokens: past that, the quadratic mask would cost more than the
repeated prompt saves.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from envhub_trainer.forward import Tokens, logits_at, token_logprobs
from envhub_trainer.row_attention import row_layout, rows_attention
from envhub_trainer.samples import TrainSample

ROW_TOKENS = 4096
"""A shared row stops taking samples here (one longer sample still gets a row of its own)."""

MASKED_ATTENTION = ("sdpa", "eager")
"""Attention implementations that take a custom 4-D mask (flash and flex kernels do not)."""


def prompt_length(sample: TrainSample) -> int:
    """Tokens before the first trained one: what the sample's row may share with others (all of them
    for a sample with nothing to train, which only ever shares with an identical one)."""
    return next((t for t in range(1, len(sample.loss_mask)) if sample.loss_mask[t]), len(sample.token_ids))


def shared_rows(samples: list[TrainSample], indices: list[int], per_row: int) -> list[list[int]]:
    """`indices` grouped into rows of samples with equal prompts, at most `per_row` samples and
    `ROW_TOKENS` tokens (unless one sample alone is longer) a row, in first-seen order."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i in indices:
        sample = samples[i]
        by_prompt.setdefault(tuple(sample.token_ids[: prompt_length(sample)]), []).append(i)
    rows: list[list[int]] = []
    for prompt, members in by_prompt.items():
        row: list[int] = []
        width = len(prompt)
        for i in members:
            tail = len(samples[i].token_ids) - len(prompt)
            if row and (len(row) == per_row or width + tail > ROW_TOKENS):
                rows.append(row)
                row, width = [], len(prompt)
            row.append(i)
            width += tail
        rows.append(row)
    return rows


def row_width(samples: list[TrainSample], row: list[int]) -> int:
    """Tokens in a shared row: the prompt once, then every sample's continuation."""
    prompt = prompt_length(samples[row[0]])
    return prompt + sum(len(samples[i].token_ids) - prompt for i in row)


def shared_prompt_logprobs(
    model: Any, samples: list[TrainSample], rows: list[list[int]], pad_id: int = 0
) -> tuple[torch.Tensor, Tokens]:
    """Logprobs (with gradient) of every sampled token of the samples in `rows`, each row a prompt shared
    by its samples (see `shared_rows`); the same values as `forward.micro_batch_logprobs`, in row order."""
    width = max(row_width(samples, row) for row in rows)
    shape = (len(rows), width)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    # By each continuation token's column: whether it is trained, the column whose logits predict it,
    # and what the loss needs of it.
    trained = torch.zeros(shape, dtype=torch.bool)
    predictor = torch.zeros(shape, dtype=torch.long)
    behaviour = torch.zeros(shape)
    advantage = torch.zeros(shape)
    sequence = torch.full(shape, -1, dtype=torch.long)
    prompts: list[int] = []
    segments: list[tuple[int, int, int]] = []  # (row, start, length) of every continuation
    for r, row in enumerate(rows):
        prompt = prompt_length(samples[row[0]])
        prompts.append(prompt)
        ids[r, :prompt] = torch.tensor(samples[row[0]].token_ids[:prompt])
        positions[r, :prompt] = torch.arange(prompt)
        start = prompt
        for i in row:
            sample = samples[i]
            n = len(sample.token_ids) - prompt
            end = start + n
            if n:
                segments.append((r, start, n))
            ids[r, start:end] = torch.tensor(sample.token_ids[prompt:])
            positions[r, start:end] = torch.arange(prompt, prompt + n)
            trained[r, start:end] = torch.tensor(sample.loss_mask[prompt:], dtype=torch.bool)
            # a token is predicted at the column before it: the prompt's last for the first one
            predictor[r, start:end] = torch.arange(start - 1, end - 1)
            predictor[r, start] = prompt - 1
            behaviour[r, start:end] = torch.tensor(sample.logprobs[prompt:])
            advantage[r, start:end] = sample.advantage
            sequence[r, start:end] = i
            start = end
        positions[r, start:] = torch.arange(width - start)
    device = next(model.parameters()).device
    mask = attention_mask(model, row_mask(*shape, prompts, segments)).to(device)
    by_rows = _implementation(model) == "sdpa" and bool(segments)
    with (
        rows_attention(model, row_layout(*shape, prompts, segments, device))
        if by_rows
        else contextlib.nullcontext()
    ):
        logits = logits_at(
            model,
            trained.nonzero()[:, 0],
            predictor[trained],  # the prompt's last column predicts every continuation's first token
            input_ids=ids.to(device),
            position_ids=positions.to(device),
            attention_mask=mask,
        )
    logprobs = token_logprobs(logits, ids[trained].to(device))
    return logprobs, Tokens(
        behaviour_logprobs=behaviour[trained].to(device),
        advantages=advantage[trained].to(device),
        sequence_ids=sequence[trained].to(device),
    )


def row_mask(rows: int, width: int, prompts: list[int], segments: list[tuple[int, int, int]]) -> torch.Tensor:
    """Which keys each query may see, (rows, query, key): a prompt causally over itself, a continuation
    (row, start, length) over its prompt and its own tokens causally, padding over itself alone (so no
    softmax row is empty)."""
    allowed = torch.zeros((rows, width, width), dtype=torch.bool)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    used = list(prompts)
    for r, prompt in enumerate(prompts):
        allowed[r, :prompt, :prompt] = causal[:prompt, :prompt]
    for r, start, n in segments:
        allowed[r, start : start + n, : prompts[r]] = True
        allowed[r, start : start + n, start : start + n] = causal[:n, :n]
        used[r] = max(used[r], start + n)
    for r, end in enumerate(used):
        allowed[r, end:, end:] = torch.eye(width - end, dtype=torch.bool)
    return allowed


def attention_mask(model: Any, allowed: torch.Tensor) -> torch.Tensor:
    """The (rows, 1, query, key) mask the model's attention takes: boolean for SDPA, additive for eager."""
    implementation = _implementation(model)
    if implementation not in MASKED_ATTENTION:
        raise ValueError(
            f"shared-prompt rows need an attention that takes a 4-D mask ({', '.join(MASKED_ATTENTION)}), "
            f"this model runs {implementation!r}: set share_prompts: false, or load it with "
            "attn_implementation='sdpa'"
        )
    if implementation == "sdpa":
        return allowed[:, None]
    dtype = next(model.parameters()).dtype
    additive = torch.zeros(allowed.shape, dtype=dtype)
    return additive.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def _implementation(model: Any) -> str:
    return getattr(model.config, "_attn_implementation", None) or "eager"
