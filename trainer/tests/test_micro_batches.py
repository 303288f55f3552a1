"""A step's micro-batches group rows of about one length, so padding each row to its micro-batch's
longest wastes little; every sample is still trained once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from envhub_trainer.config import TrainConfig
from envhub_trainer.grpo import micro_batches, train_step
from envhub_trainer.samples import TrainSample


def samples(lengths: list[int]) -> list[TrainSample]:
    return [
        TrainSample(
            token_ids=[1] * n, loss_mask=[0] + [1] * (n - 1), logprobs=[0.0] * n, reward=0.0, group=0,
            episode_id=str(i), version=0,
        )
        for i, n in enumerate(lengths)
    ]  # fmt: skip


def padded_tokens(batches: list[list[list[int]]], lengths: list[int]) -> int:
    """Token cells the forward passes compute: rows x the longest row, per micro-batch."""
    width = [[sum(lengths[i] for i in row) for row in rows] for rows in batches]
    return sum(len(rows) * max(w) for rows, w in zip(batches, width, strict=True))


def test_rows_of_one_length_share_a_micro_batch() -> None:
    lengths = [10, 50, 12, 48, 11, 49, 13, 47]  # short and long sequences in turn, as episodes finish
    config = TrainConfig.model_validate(
        {"model": "m", "env_id": "x", "micro_batch_size": 4, "share_prompts": False}  # one row a sample
    )
    batches = micro_batches(samples(lengths), config)
    assert sorted(i for rows in batches for row in rows for i in row) == list(range(8))  # each once
    assert [sorted(lengths[i] for row in rows for i in row) for rows in batches] == [
        [10, 11, 12, 13],
        [47, 48, 49, 50],
    ]
    assert padded_tokens(batches, lengths) == 4 * 13 + 4 * 50  # in arrival order: 4 * 50 + 4 * 49


def test_packed_rows_are_ordered_by_length_too() -> None:
    lengths = [30, 5, 28, 6, 25, 4, 20, 3]
    config = TrainConfig.model_validate(
        {"model": "m", "env_id": "x", "micro_batch_size": 2, "pack_tokens": 32}
    )
    batches = micro_batches(samples(lengths), config)
    assert sorted(i for rows in batches for row in rows for i in row) == list(range(8))
    totals = [sum(lengths[i] for i in row) for rows in batches for row in rows]
    assert totals == sorted(totals) and max(totals) <= 32


def test_a_step_reports_its_tokens_with_and_without_padding(tiny_model: Path) -> None:
    """`model_tokens` counts what the rows hold, `padded_tokens` what the forward passes computed: the
    per-token cost bench-trl reports divides by one or the other."""
    from transformers import AutoModelForCausalLM

    lengths = [10, 50, 12, 48, 11, 49, 13, 47]
    batch = [replace(s, advantage=1.0 if i % 2 else -1.0) for i, s in enumerate(samples(lengths))]
    config = TrainConfig.model_validate(
        {"model": str(tiny_model), "env_id": "x", "micro_batch_size": 3, "share_prompts": False}
    )
    model = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = train_step(model, optimiser, batch, config)
    assert stats["model_tokens"] == sum(lengths)
    assert stats["padded_tokens"] == padded_tokens(micro_batches(batch, config), lengths) > sum(lengths)
