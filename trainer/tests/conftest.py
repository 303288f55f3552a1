"""A tiny chat model built once per test session (random weights, locally trained tokenizer)."""

from __future__ import annotations

from pathlib import Path

import pytest
from envhub_trainer.testing import register_digits

from envhub.testing.tiny_model import tiny_chat_model


@pytest.fixture(autouse=True, scope="session")
def digits_env() -> str:
    """The trainer tests' env, registered here rather than on import of a shipped module."""
    return register_digits()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_chat_model(tmp_path_factory.mktemp("tiny") / "model", vocab_size=300, hidden_size=64)
