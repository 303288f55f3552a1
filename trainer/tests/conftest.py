"""A tiny chat model built once per test session (random weights, locally trained tokenizer), and a
trivially learnable environment with a run configuration that learns it in a few steps."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from envhub_trainer.config import TrainConfig

import envhub
from envhub.testing.tiny_model import tiny_chat_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_chat_model(tmp_path_factory.mktemp("tiny") / "model", vocab_size=300, hidden_size=64)


class Digits(envhub.SingleTurnEnv):
    """Trivially learnable: the reward is the share of the reply's characters that are digits."""

    def setup(self, rng: random.Random) -> str:
        return f"Say a number like {rng.randint(0, 99)}."

    @envhub.reward
    def digits(self, answer: str) -> float:
        return sum(c.isdigit() for c in answer) / max(len(answer), 1)


envhub.register("digits-conftest-v0", Digits, override=True)


@pytest.fixture
def digits_config() -> Callable[..., TrainConfig]:
    """A run on the digits env that raises its reward within 12 steps (lr 5e-3, 4 tasks x 6 episodes)."""

    def make(model: Path, run_dir: Path, **overrides: object) -> TrainConfig:
        options: dict[str, object] = {
            "model": model,
            "env_id": "digits-conftest-v0",
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

    return make
