"""Fixtures for the model-backed policies: a real fake-server process, a tiny model trained on the spot."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.messages import Message
from envhub.policies import OraclePolicy
from envhub.rollout.runner import run_episode
from envhub.testing.openai_server import OpenAIServer
from envhub.tools import ToolSpec


@pytest.fixture(scope="session")
def server() -> Iterator[OpenAIServer]:
    """One scripted OpenAI-compatible server process for the session; each test scripts it afresh."""
    with OpenAIServer.start() as running:
        yield running


Conversation = tuple[list[Message], list[ToolSpec]]


async def oracle_conversation(seed: int, **env_kwargs: Any) -> Conversation:
    """The whole conversation of an arithmetic episode played by its reference solution, and its tools."""
    async with envhub.make("arithmetic", **env_kwargs) as env:
        episode = await run_episode(env, OraclePolicy(), seed=seed)
        assert episode.reward == 1.0, episode
        messages = list(episode.prompt)
        for turn in episode.turns:
            messages += [turn.action, *turn.observation]
        return messages, env.tools


@pytest.fixture(scope="session")
def oracle() -> Callable[..., Awaitable[Conversation]]:
    """`await oracle(seed, **env_kwargs)`: an arithmetic episode as its reference solution plays it."""
    return oracle_conversation


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-layer Qwen2 and a locally trained tokenizer; it has memorised arithmetic episode 0 (one step)."""
    for module in ("torch", "transformers", "tokenizers"):
        reason = f"the hf policy tests need {module}: pip install 'envhub-core[hf]'"
        pytest.importorskip(module, reason=reason)
    from envhub.testing.tiny_model import tiny_chat_model

    conversation = asyncio.run(oracle_conversation(seed=0, steps=1))
    return tiny_chat_model(tmp_path_factory.mktemp("tiny-model"), conversations=[conversation])
