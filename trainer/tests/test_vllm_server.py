"""vLLM's OpenAI server as the rollout engine: a real server process, real HTTP, real weight reloads.

Run by `make test-vllm` (they skip, saying so, where vLLM is not installed).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from envhub_trainer.testing import digits_config, hf_logprobs
from envhub_trainer.testing import sample_turn as sample
from transformers import AutoModelForCausalLM

from envhub.messages import user

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed in this venv: `make test-vllm` runs these in one that has it",
    ),
]

LONG = "Count the sheep in the field, one by one, and say how many there are. " * 8


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from envhub.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(tmp_path_factory.mktemp("vllm-server") / "model", hidden_size=128, heads=2)


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Any]:
    from envhub_trainer.vllm_server import VLLMServerEngine

    engine = VLLMServerEngine(model_dir, max_new_tokens=8, seed=0, max_model_len=512)
    yield engine
    engine.close()
    assert engine.process is not None and engine.process.poll() is not None  # the server is gone


def perturbed(model_dir: Path, scale: float = 0.05) -> Any:
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model.eval()  # type: ignore[no-untyped-call]


def test_served_tokens_and_logprobs_are_the_models(server: Any, model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    prompt, completion, logprobs = sample(server)
    # the prompt ids came back from the server and are the chat template's, as the trainer renders it
    assert prompt == server.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say a number like 7."}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    model.eval()  # type: ignore[no-untyped-call]
    assert torch.allclose(hf_logprobs(model, prompt, completion), torch.tensor(logprobs), atol=1e-4)


def test_a_sync_over_http_serves_the_trainers_weights(server: Any, model_dir: Path) -> None:
    sample(server, LONG)  # leave KV of the old weights in the prefix cache
    before = server.checksum()
    trainer = perturbed(model_dir)
    server.sync(trainer.state_dict(), version=2)
    assert server.version == 2 and server.checksum() != before
    prompt, completion, logprobs = sample(server, LONG)
    difference = (hf_logprobs(trainer, prompt, completion) - torch.tensor(logprobs)).abs().max()
    assert difference < 1e-4  # new weights, and no stale KV of the old ones


def test_the_prefix_cache_hit_rate_is_reported(server: Any) -> None:
    server.metrics()

    async def group() -> None:
        policy = server.policy()
        await asyncio.gather(*(policy.for_episode(None).act([user(LONG)], []) for _ in range(4)))

    asyncio.run(group())
    metrics = server.metrics()
    assert 0.5 < metrics["prefix_cache_hit_rate"] <= 1.0, metrics


def test_a_sync_the_server_rejects_fails_loudly(server: Any, model_dir: Path) -> None:
    from envhub_trainer.vllm_engine import WeightSyncError

    state = dict(perturbed(model_dir).state_dict())
    name = next(iter(state))
    state[name] = torch.zeros(3, 5)  # a shape the model does not have
    with pytest.raises(WeightSyncError, match="failed to load weights version 9"):
        server.sync(state, version=9)
    assert server.version != 9


def test_grpo_through_the_server_raises_the_reward(model_dir: Path, tmp_path: Path) -> None:
    """The CI-sized run, with episodes sampled over HTTP by a server the run starts and stops."""
    from envhub_trainer.grpo import train

    rows = train(digits_config(model_dir, tmp_path / "run", engine="vllm-server", concurrency=8))
    rewards = [r["reward_mean"] for r in rows]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.2, rewards
    fingerprints = [r["weights_checksum"] for r in rows if "weights_checksum" in r]
    assert len(set(fingerprints)) == len(fingerprints) == 11  # every sync changed what the server computes
