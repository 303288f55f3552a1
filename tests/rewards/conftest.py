"""Fixtures for the graders: a real scripted OpenAI server process, and a tiny reward model built locally."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.testing.openai_server import OpenAIServer


@pytest.fixture(scope="session")
def judge_server() -> Iterator[OpenAIServer]:
    """One scripted OpenAI-compatible server process for the session; each test scripts it afresh."""
    with OpenAIServer.start(model="judge-model") as running:
        yield running


@pytest.fixture(scope="session")
def reward_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-layer Qwen2 sequence classifier with one label and random weights, saved locally."""
    for module in ("torch", "transformers", "tokenizers"):
        reason = f"the reward model tests need {module}: pip install 'envhub-core[hf]'"
        pytest.importorskip(module, reason=reason)
    from envhub.testing.tiny_reward_model import tiny_reward_model

    return tiny_reward_model(tmp_path_factory.mktemp("tiny-reward-model"))
