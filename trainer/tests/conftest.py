"""A tiny chat model built once per test session (random weights, locally trained tokenizer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.testing.tiny_model import tiny_chat_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_chat_model(tmp_path_factory.mktemp("tiny") / "model", vocab_size=300, hidden_size=64)
