"""Samples sharing a prompt share a row: fewer tokens through the model, the same logprobs and update."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from envhub_trainer import row_attention
from envhub_trainer.config import TrainConfig
from envhub_trainer.forward import micro_batch_logprobs
from envhub_trainer.grpo import micro_batches, train_step
from envhub_trainer.samples import TrainSample
from envhub_trainer.shared_prompt import ROW_TOKENS, row_mask, row_width, shared_prompt_logprobs, shared_rows
from envhub_trainer.shares import split
from transformers import AutoModelForCausalLM


def groups(tasks: int = 3, size: int = 4, seed: int = 0, turns: int = 1) -> list[TrainSample]:
    """`size` samples of each task's prompt, with completions of different lengths (and, with
    `turns` > 1, an untrained observation between trained turns, as a multi-turn episode has)."""
    rng = random.Random(seed)
    out = []
    for task in range(tasks):
        prompt = [rng.randrange(5, 250) for _ in range(rng.randint(4, 12))]
        for k in range(size):
            ids, mask = list(prompt), [0] * len(prompt)
            for turn in range(turns):
                if turn:
                    observation = rng.randint(1, 4)
                    ids += [rng.randrange(5, 250) for _ in range(observation)]
                    mask += [0] * observation
                completion = rng.randint(1, 7)
                ids += [rng.randrange(5, 250) for _ in range(completion)]
                mask += [1] * completion
            out.append(
                TrainSample(
                    token_ids=ids,
                    loss_mask=mask,
                    logprobs=[-rng.random() * 5 if m else 0.0 for m in mask],
                    reward=0.0,
                    group=task,
                    episode_id=f"{task}-{k}",
                    version=0,
                    advantage=rng.uniform(-1, 1),
                )
            )
    rng.shuffle(out)  # samples of a task need not be next to each other
    return out


def model(tiny_model: Path, attention: str = "sdpa") -> Any:
    return AutoModelForCausalLM.from_pretrained(
        tiny_model, local_files_only=True, dtype=torch.float64, attn_implementation=attention
    )


def by_sequence(logprobs: torch.Tensor, sequence_ids: torch.Tensor) -> torch.Tensor:
    return logprobs[torch.argsort(sequence_ids, stable=True)]


def test_samples_of_one_prompt_share_rows_within_the_size() -> None:
    batch = groups(tasks=3, size=4)
    rows = shared_rows(batch, list(range(len(batch))), per_row=3)
    assert sorted(i for row in rows for i in row) == list(range(len(batch)))  # every sample once
    assert sorted(len(row) for row in rows) == [1, 1, 1, 3, 3, 3]  # 4 a task, at most 3 a row
    for row in rows:
        assert len({batch[i].group for i in row}) == 1
    per_sample = sum(len(s.token_ids) for s in batch)
    assert sum(row_width(batch, row) for row in rows) < per_sample


def test_a_row_stops_taking_samples_at_its_token_limit() -> None:
    long = [
        TrainSample(
            token_ids=[7] * 10 + [8] * (ROW_TOKENS // 2), loss_mask=[0] * 10 + [1] * (ROW_TOKENS // 2),
            logprobs=[0.0] * (10 + ROW_TOKENS // 2), reward=0.0, group=0, episode_id=str(k), version=0,
        )
        for k in range(3)
    ]  # fmt: skip
    rows = shared_rows(long, [0, 1, 2], per_row=8)
    assert rows == [[0], [1], [2]]  # two would pass ROW_TOKENS with the prompt


@pytest.mark.parametrize("turns", [1, 3])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_shared_rows_give_each_samples_own_logprobs(tiny_model: Path, turns: int, attention: str) -> None:
    lm = model(tiny_model, attention)
    batch = groups(turns=turns)
    alone, alone_tokens = micro_batch_logprobs(lm, batch, [[i] for i in range(len(batch))])
    rows = shared_rows(batch, list(range(len(batch))), per_row=4)
    assert max(map(len, rows)) == 4
    shared, shared_tokens = shared_prompt_logprobs(lm, batch, rows)
    alone_ids, shared_ids = alone_tokens.sequence_ids, shared_tokens.sequence_ids
    assert torch.equal(torch.sort(alone_ids).values, torch.sort(shared_ids).values)
    assert torch.allclose(by_sequence(alone, alone_ids), by_sequence(shared, shared_ids), atol=1e-10)
    for field in ("advantages", "behaviour_logprobs"):
        assert torch.equal(
            by_sequence(getattr(alone_tokens, field), alone_tokens.sequence_ids),
            by_sequence(getattr(shared_tokens, field), shared_tokens.sequence_ids),
        )


def test_a_step_with_shared_prompts_updates_the_same_weights(tiny_model: Path) -> None:
    base = model(tiny_model)
    batch = groups(turns=2)

    def step(**overrides: Any) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        lm = copy.deepcopy(base)
        config = TrainConfig.model_validate({"model": tiny_model, "env_id": "x", "lr": 1e-2, **overrides})
        optimiser = torch.optim.SGD(lm.parameters(), lr=config.lr)
        return train_step(lm, optimiser, batch, config), lm.state_dict()

    padded_stats, padded = step(share_prompts=False, micro_batch_size=5)
    shared_stats, shared = step(share_prompts=True, micro_batch_size=5)
    assert shared_stats["loss"] == pytest.approx(padded_stats["loss"], rel=1e-9)
    assert shared_stats["trained_tokens"] == padded_stats["trained_tokens"]
    assert all(torch.allclose(padded[k], shared[k], atol=1e-10) for k in padded)
    embedding = "model.embed_tokens.weight"
    assert not torch.equal(shared[embedding], base.state_dict()[embedding])


def test_the_model_runs_shared_prompt_rows_through_row_attention(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = model(tiny_model, "sdpa")
    calls: list[tuple[int, ...]] = []
    real = row_attention.attend_rows

    def counted(query: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(tuple(query.shape))
        return real(query, *args, **kwargs)

    monkeypatch.setattr(row_attention, "attend_rows", counted)
    batch = groups(turns=2)
    rows = shared_rows(batch, list(range(len(batch))), per_row=4)
    logprobs, _ = shared_prompt_logprobs(lm, batch, rows)
    assert len(calls) == lm.config.num_hidden_layers  # every layer, once
    assert lm.config._attn_implementation == "sdpa"  # put back after the forward
    logprobs.sum().backward()  # type: ignore[no-untyped-call]  # the backward runs outside the block
    assert all(p.grad is not None for p in lm.model.layers[0].self_attn.parameters())


def test_micro_batches_hold_at_most_micro_batch_size_samples() -> None:
    batch = groups(tasks=5, size=4)
    config = TrainConfig.model_validate({"model": "m", "env_id": "x", "micro_batch_size": 6})
    batches = micro_batches(batch, config)
    assert sorted(i for rows in batches for row in rows for i in row) == list(range(len(batch)))
    assert all(sum(map(len, rows)) <= 6 for rows in batches)
    assert all(len({batch[i].group for i in row}) == 1 for rows in batches for row in rows)


def test_an_attention_without_custom_masks_is_refused_with_the_fix(tiny_model: Path) -> None:
    lm = model(tiny_model)
    lm.config._attn_implementation = "flash_attention_2"
    batch = groups(tasks=1, size=2)
    with pytest.raises(ValueError, match="share_prompts: false"):
        shared_prompt_logprobs(lm, batch, [[0, 1]])


def test_data_parallel_shares_keep_a_prompts_samples_on_one_rank() -> None:
    batch = groups(tasks=6, size=4)

    def tasks_on(part: list[int]) -> set[int]:
        return {batch[i].group for i in part}

    first, second = split(batch, 2, share_prompts=True)
    assert sorted(first + second) == list(range(len(batch)))  # every sample once
    assert not tasks_on(first) & tasks_on(second)  # each task whole on one rank
    assert first and second  # both ranks train
    first, second = split(batch, 2, share_prompts=False)  # a sample at a time, as before
    assert tasks_on(first) & tasks_on(second)  # cuts tasks across ranks: the control


def test_row_mask_lets_a_continuation_see_its_prompt_and_itself_only() -> None:
    # one row: a prompt of 2, continuations of 2 and 1, one column of padding
    allowed = row_mask(1, 6, [2], [(0, 2, 2), (0, 4, 1)])[0].int().tolist()
    assert allowed == [
        [1, 0, 0, 0, 0, 0],  # prompt, causal
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],  # first continuation: the prompt, then itself causally
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],  # second: the prompt and itself, never the first
        [0, 0, 0, 0, 0, 1],  # padding sees itself alone
    ]
