"""What the trainer's tests share: a trivially learnable env, a run that learns it, logprobs by hand.

A module rather than conftest fixtures, because processes the tests start (data-parallel ranks, Ray
actors) import it too. Importing it registers nothing (a shipped module must not change the registry of
whoever imports it): the tests' fixtures, and any process that plays the env, call `register_digits`.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import torch

import envhub
from envhub.messages import user
from envhub.policies.base import Generation
from envhub_trainer.config import TrainConfig

DIGITS_ENV = "digits-test-v0"


class Digits(envhub.SingleTurnEnv):
    """Trivially learnable: the reward is the share of the reply's characters that are digits."""

    def setup(self, rng: random.Random) -> str:
        return f"Say a number like {rng.randint(0, 99)}."

    @envhub.reward
    def digits(self, answer: str) -> float:
        return sum(c.isdigit() for c in answer) / max(len(answer), 1)


def register_digits() -> str:
    """Register the digits env under DIGITS_ENV (again, harmlessly, if it already is) and return the id."""
    envhub.register(DIGITS_ENV, Digits, override=True)
    return DIGITS_ENV


def digits_config(model: Path, run_dir: Path, **overrides: object) -> TrainConfig:
    """A run on the digits env that raises a tiny model's reward within 12 steps (lr 5e-3, 4 x 6)."""
    options: dict[str, object] = {
        "model": model,
        "env_id": DIGITS_ENV,
        "run_dir": run_dir,
        "steps": 12,
        "tasks_per_step": 4,
        "group_size": 6,
        "lr": 5e-3,
        "concurrency": 1,  # episodes then draw sampling seeds in a fixed order: runs repeat exactly
        "max_new_tokens": 4,
        "checkpoint_every": 4,
        "verify_sync": True,
        "tensorboard": False,
        "pass_threshold": 0.5,
    }
    return TrainConfig.model_validate({**options, **overrides})


def hf_logprobs(model: Any, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """The logprobs a plain forward pass gives the completion's tokens: what an engine must report."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
    return logprobs[len(prompt) - 1 :].gather(-1, ids[0, len(prompt) :, None])[:, 0]


def sample_turn(engine: Any, text: str = "Say a number like 7.") -> tuple[list[int], list[int], list[float]]:
    """One sampled turn of a fresh episode: (prompt ids, completion ids, completion logprobs)."""
    generation = asyncio.run(engine.policy().for_episode(None).act([user(text)], []))
    assert isinstance(generation, Generation) and generation.tokens is not None
    trace = generation.tokens
    assert trace.prompt_token_ids is not None and trace.completion_logprobs is not None
    assert len(trace.completion_token_ids) == len(trace.completion_logprobs) > 0
    return trace.prompt_token_ids, trace.completion_token_ids, trace.completion_logprobs
