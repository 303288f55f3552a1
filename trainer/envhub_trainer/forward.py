"""Token logprobs of many sequences in one forward pass: padded (one sequence a row) or packed.

Packing concatenates sequences into rows of a fixed token budget; position ids restart at 0 for each
sequence, and transformers turns restarting position ids (with no attention mask) into a
block-diagonal causal mask, so no token attends across a sequence boundary.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from envhub_trainer.samples import TrainSample


@dataclass
class Tokens:
    """A micro-batch's sampled tokens, flattened: what `grpo_loss` takes (besides the logprobs)."""

    behaviour_logprobs: torch.Tensor
    advantages: torch.Tensor
    sequence_ids: torch.Tensor
    """Index of each token's sample in the step's sample list."""


def pack(lengths: list[int], budget: int) -> list[list[int]]:
    """Indices of sequences grouped into rows of at most `budget` tokens (first fit, longest first).

    A sequence longer than the budget gets a row of its own.
    """
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[index]
        slot = next((r for r, left in enumerate(room) if left >= n), None)
        if slot is None:
            rows.append([index])
            room.append(budget - n)
        else:
            rows[slot].append(index)
            room[slot] -= n
    return rows


def micro_batch_logprobs(
    model: Any, samples: list[TrainSample], rows: list[list[int]], pad_id: int = 0
) -> tuple[torch.Tensor, Tokens]:
    """Logprobs (with gradient) of every sampled token of `samples[i]` for i in `rows`.

    Each row holds one sequence (padding) or several (packing). The returned tensors are 1-D over the
    sampled tokens, in row order.
    """
    width = max(sum(len(samples[i].token_ids) for i in row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    trained = torch.zeros((len(rows), width), dtype=torch.bool)
    behaviour = torch.zeros((len(rows), width))
    advantage = torch.zeros((len(rows), width))
    sequence = torch.full((len(rows), width), -1, dtype=torch.long)
    for r, row in enumerate(rows):
        at = 0
        for i in row:
            sample = samples[i]
            n = len(sample.token_ids)
            ids[r, at : at + n] = torch.tensor(sample.token_ids)
            positions[r, at : at + n] = torch.arange(n)
            # Token t is predicted at position t-1: shift mask and targets left by one.
            trained[r, at : at + n - 1] = torch.tensor(sample.loss_mask[1:], dtype=torch.bool)
            behaviour[r, at : at + n - 1] = torch.tensor(sample.logprobs[1:])
            advantage[r, at : at + n - 1] = sample.advantage
            sequence[r, at : at + n - 1] = i
            at += n
        positions[r, at:] = torch.arange(width - at)  # the padding tail is a sequence of its own
    device = next(model.parameters()).device
    ids, positions, trained = ids.to(device), positions.to(device), trained.to(device)
    behaviour, advantage, sequence = behaviour.to(device), advantage.to(device), sequence.to(device)
    # Position p's logits predict token p + 1.
    at_row, at_column = trained.nonzero().unbind(dim=1)
    logits = logits_at(model, at_row, at_column, input_ids=ids, position_ids=positions)
    logprobs = token_logprobs(logits, ids[at_row, at_column + 1])
    return logprobs, Tokens(
        behaviour_logprobs=behaviour[trained], advantages=advantage[trained], sequence_ids=sequence[trained]
    )


def logits_at(model: Any, rows: torch.Tensor, columns: torch.Tensor, **inputs: Any) -> torch.Tensor:
    """The model's logits at positions (rows[k], columns[k]) alone: a (len(rows), vocabulary) tensor.

    The LM head is a vocabulary-wide matmul, and so is its gradient. It runs here on the hidden states
    of the asked positions only (prompts, observations and padding need no logits), gathered on their
    way into the head, so whatever a model does after its head (soft-capping, scaling) still applies.
    Slicing columns with `logits_to_keep` instead runs the head on every row at every column some row
    asks for, and the gradient of the picked logits is scattered back into a zero tensor that wide."""
    with _head_input_gathered(model, rows, columns) as gathered:
        logits: torch.Tensor = model(**inputs, use_cache=False).logits
    # squeeze, not [0]: the gradient of a view is a view, where select's is a zero-filled copy
    if gathered():
        return logits.squeeze(0)
    return logits[rows.to(logits.device), columns.to(logits.device)]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(targets[k]) under logits[k], in float32 at least (bf16 logits lose the tail)."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None])[:, 0]


@contextmanager
def _head_input_gathered(model: Any, rows: torch.Tensor, columns: torch.Tensor) -> Iterator[Any]:
    """Within the block the output embedding sees only hidden[rows, columns] (as one row); yields a
    function telling whether it did (a model that never calls its head as a module leaves it unused)."""
    head = model.get_output_embeddings()
    called = False

    def gather(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        nonlocal called
        called = True
        hidden, *rest = args
        return (hidden[rows.to(hidden.device), columns.to(hidden.device)][None], *rest)

    handle = head.register_forward_pre_hook(gather) if isinstance(head, torch.nn.Module) else None
    try:
        yield lambda: called
    finally:
        if handle is not None:
            handle.remove()
