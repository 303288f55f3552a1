"""Packing and micro-batching change how tokens are batched, never the loss or the update."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from envhub_trainer.config import TrainConfig
from envhub_trainer.forward import logits_at, micro_batch_logprobs, pack
from envhub_trainer.grpo import train_step
from envhub_trainer.samples import TrainSample
from transformers import AutoModelForCausalLM


def samples(count: int = 6, seed: int = 0) -> list[TrainSample]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        prompt, completion = rng.randint(3, 12), rng.randint(1, 9)
        out.append(
            TrainSample(
                token_ids=[rng.randrange(5, 250) for _ in range(prompt + completion)],
                loss_mask=[0] * prompt + [1] * completion,
                logprobs=[0.0] * prompt + [-rng.random() * 5 for _ in range(completion)],
                reward=0.0,
                group=i // 2,
                episode_id=str(i),
                version=0,
                advantage=rng.uniform(-1, 1),
            )
        )
    return out


def test_pack_fills_rows_within_the_budget() -> None:
    rows = pack([7, 3, 5, 2, 9, 4], budget=10)
    assert sorted(i for row in rows for i in row) == list(range(6))
    assert all(sum([7, 3, 5, 2, 9, 4][i] for i in row) <= 10 for row in rows)
    assert len(rows) == 4  # 30 tokens, and the 9 fits with nothing: 4 rows is the least possible


def test_packed_and_padded_logprobs_and_loss_match(tiny_model: Path) -> None:
    model: Any = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True, dtype=torch.float64)
    batch = samples()
    padded, padded_tokens = micro_batch_logprobs(model, batch, [[i] for i in range(len(batch))])
    rows = pack([len(s.token_ids) for s in batch], budget=32)
    assert len(rows) < len(batch)  # several sequences share a row
    packed, packed_tokens = micro_batch_logprobs(model, batch, rows)
    order_padded = torch.argsort(padded_tokens.sequence_ids, stable=True)
    order_packed = torch.argsort(packed_tokens.sequence_ids, stable=True)
    assert torch.allclose(padded[order_padded], packed[order_packed], atol=1e-10)
    assert torch.equal(padded_tokens.advantages[order_padded], packed_tokens.advantages[order_packed])


def test_logprobs_are_a_plain_forward_pass_at_the_trained_tokens(tiny_model: Path) -> None:
    """The LM head runs only where some row trains; what it gives must equal the full forward's."""
    model: Any = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True, dtype=torch.float64)
    batch = samples()
    logprobs, tokens = micro_batch_logprobs(model, batch, [[i] for i in range(len(batch))])
    expected = []
    for sample in batch:
        ids = torch.tensor([sample.token_ids])
        with torch.no_grad():
            full = torch.log_softmax(model(input_ids=ids).logits[0, :-1], dim=-1)
        trained = torch.tensor(sample.loss_mask[1:], dtype=torch.bool)
        expected.append(full[trained].gather(-1, ids[0, 1:][trained][:, None])[:, 0])
    assert tokens.sequence_ids.tolist() == [i for i, e in enumerate(expected) for _ in e]
    assert torch.allclose(logprobs.detach(), torch.cat(expected), atol=1e-10)


def test_the_lm_head_runs_on_the_asked_positions_alone(tiny_model: Path) -> None:
    """Logits of a few (row, column) positions: what the full forward gives there, with the head's
    vocabulary-wide matmul run on those positions only, and the same from a model whose head is not
    called as a module (the full forward, picked afterwards)."""
    model: Any = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True, dtype=torch.float64)
    ids = torch.randint(5, 250, (3, 12))
    rows, columns = torch.tensor([0, 0, 2, 1]), torch.tensor([3, 11, 0, 3])
    with torch.no_grad():
        full = model(input_ids=ids).logits[rows, columns]
    head_rows: list[int] = []
    handle = model.get_output_embeddings().register_forward_hook(
        lambda _module, args, _out: head_rows.append(args[0].shape[:-1].numel())
    )
    picked = logits_at(model, rows, columns, input_ids=ids)
    handle.remove()
    assert head_rows == [4]  # not 3 rows x 12 columns, nor 3 x the 3 columns asked
    assert torch.allclose(picked, full, atol=1e-10)

    model.get_output_embeddings = lambda: None  # as a model that applies its head as a plain function
    assert torch.allclose(logits_at(model, rows, columns, input_ids=ids), full, atol=1e-10)


@pytest.mark.parametrize("options", [{"micro_batch_size": 1}, {"pack_tokens": 32, "micro_batch_size": 1}])
def test_a_step_updates_the_same_weights_however_tokens_are_batched(
    tiny_model: Path, options: dict[str, Any]
) -> None:
    base: Any = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True, dtype=torch.float64)
    batch = samples()

    def step(**overrides: Any) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        model = copy.deepcopy(base)
        config = TrainConfig.model_validate({"model": tiny_model, "env_id": "x", "lr": 1e-2, **overrides})
        optimiser = torch.optim.SGD(model.parameters(), lr=config.lr)
        stats = train_step(model, optimiser, batch, config)
        return stats, model.state_dict()

    whole_stats, whole = step(micro_batch_size=64)
    split_stats, split = step(**options)
    assert split_stats["loss"] == pytest.approx(whole_stats["loss"], rel=1e-9)
    assert all(torch.allclose(whole[k], split[k], atol=1e-10) for k in whole)
    assert not torch.equal(whole["model.embed_tokens.weight"], base.state_dict()["model.embed_tokens.weight"])
