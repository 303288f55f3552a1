"""Data parallel over two CPU processes (gloo, FSDP2): the same loss and weights as one process."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from envhub_trainer import distributed
from envhub_trainer.config import TrainConfig
from envhub_trainer.grpo import train_step
from envhub_trainer.samples import TrainSample
from torch.multiprocessing.spawn import spawn
from transformers import AutoModelForCausalLM


def samples(vocab: int) -> list[TrainSample]:
    """Five sequences of different lengths, prompts unmasked, completions masked in, mixed advantages."""
    rng = random.Random(0)
    out = []
    for i, (prompt, completion) in enumerate([(5, 7), (3, 2), (8, 11), (4, 5), (6, 3)]):
        ids = [rng.randrange(vocab) for _ in range(prompt + completion)]
        out.append(
            TrainSample(
                token_ids=ids,
                loss_mask=[0] * prompt + [1] * completion,
                logprobs=[0.0] * prompt + [rng.uniform(-3, -1) for _ in range(completion)],
                reward=float(i % 2),
                group=0,
                episode_id=str(i),
                version=0,
                advantage=[1.0, -0.5, 0.7, -1.2, 0.3][i],
            )
        )
    return out


def config(model: Path) -> TrainConfig:
    # Two rows a micro-batch: rank 0 (3 samples) runs two forwards, rank 1 (2 samples) one and an empty one.
    return TrainConfig(model=model, env_id="unused", micro_batch_size=2, lr=1.0, max_grad_norm=1.0)


def step(model: Any, batch: list[TrainSample], run: TrainConfig) -> dict[str, float]:
    # SGD, so equal updates mean equal gradients: Adam's first step, lr * g / (|g| + eps), would turn
    # float-rounding differences of near-zero gradient entries into differences of lr.
    optimiser = torch.optim.SGD(model.parameters(), lr=run.lr)
    return train_step(model, optimiser, batch, run)


def _rank(rank: int, world: int, model_dir: Path, out: Path, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
        model = distributed.shard(model)
        batch = samples(model.config.vocab_size)[rank::world]
        metrics = step(model, batch, config(model_dir))
        state = distributed.full_state_dict(model)
        if rank == 0:
            torch.save({"metrics": metrics, "state": state}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # starts two processes that each import torch and transformers: ~20 s
def test_fsdp2_over_two_processes_matches_one_process(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "rank0.pt"
    port = random.randrange(20000, 60000)
    spawn(_rank, args=(2, tiny_model, out, port), nprocs=2, join=True)  # type: ignore[no-untyped-call]
    sharded = torch.load(out, weights_only=False)

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True, dtype=torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    single = step(model, samples(model.config.vocab_size), config(tiny_model))

    assert sharded["metrics"]["trained_tokens"] == single["trained_tokens"] == 28
    assert sharded["metrics"]["loss"] == pytest.approx(single["loss"], rel=1e-5, abs=1e-7)
    assert sharded["metrics"]["grad_norm"] == pytest.approx(single["grad_norm"], rel=1e-4)
    moved = 0
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(sharded["state"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
        moved += int(not torch.equal(tensor, before[name]))
    assert moved > 0  # the step changed weights, and both runs changed them alike


def test_a_process_group_of_one_is_not_data_parallel(tmp_path: Path) -> None:
    """vLLM in the trainer's process makes a gloo group of one for itself: the trainer must still take
    its one-process paths (in-place gradient accumulation, no all-reduce of every figure)."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert dist.is_initialized()
        assert not distributed.active()
        assert (distributed.world_size(), distributed.rank()) == (1, 0)
        assert distributed.global_sum([1.5, 2.0]) == [1.5, 2.0]
    finally:
        dist.destroy_process_group()
