"""The vLLM engine against a real (CPU) vLLM: logprobs, weight sync, prefix caching, batching, training.

They run in vLLM's own venv: `make test-vllm` (they skip, saying so, where vLLM is not installed).
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from envhub_trainer.testing import digits_config, hf_logprobs
from envhub_trainer.testing import sample_turn as sample
from transformers import AutoModelForCausalLM

from envhub.messages import user
from envhub.policies.base import Generation

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed in this venv: `make test-vllm` runs these in one that has it",
    ),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM's CPU attention wants head_dim in {32, 64, 80, 96, 112, 128}: hidden 128, 2 heads."""
    from envhub.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(tmp_path_factory.mktemp("vllm") / "model", hidden_size=128, heads=2)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Any:
    from envhub_trainer.vllm_engine import VLLMEngine

    return VLLMEngine(model_dir, max_new_tokens=12, temperature=1.0, seed=0, max_model_len=512)


def test_sampled_logprobs_equal_a_hf_forward_pass(engine: Any, model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    model.eval()  # type: ignore[no-untyped-call]
    prompt, completion, logprobs = sample(engine)
    assert torch.allclose(hf_logprobs(model, prompt, completion), torch.tensor(logprobs), atol=1e-4)


def test_sync_loads_the_trainers_weights(engine: Any, model_dir: Path) -> None:
    trainer = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    before = engine.checksum()
    started = time.perf_counter()
    engine.sync(trainer.state_dict(), version=3)
    seconds = time.perf_counter() - started
    assert engine.version == 3 and engine.checksum() != before
    prompt, completion, logprobs = sample(engine)
    trainer.eval()  # type: ignore[no-untyped-call]
    difference = (hf_logprobs(trainer, prompt, completion) - torch.tensor(logprobs)).abs().max()
    print(f"sync {seconds:.3f} s; max |logprob vLLM - HF| after sync {float(difference):.2e}")
    assert difference < 1e-4


LONG = "Count the sheep in the field, one by one, and say how many there are. " * 8
"""A prompt of several KV-cache blocks (32 tokens each), so prefix caching has something to reuse."""


def test_a_groups_shared_prompt_hits_the_prefix_cache(engine: Any) -> None:
    engine.metrics()  # start counting from here

    async def group() -> list[Generation]:
        policy = engine.policy()
        return list(await asyncio.gather(*(policy.for_episode(None).act([user(LONG)], []) for _ in range(4))))

    calls = engine.generate_calls
    generations = asyncio.run(group())
    assert engine.generate_calls == calls + 1  # the four turns were generated in one batched call
    prompts = {tuple(g.tokens.prompt_token_ids or []) for g in generations if g.tokens is not None}
    assert len(prompts) == 1 and len(next(iter(prompts))) > 64
    metrics = engine.metrics()
    assert 0.5 < metrics["prefix_cache_hit_rate"] <= 1.0, metrics  # 3 of 4 copies reuse the first's KV
    assert engine.metrics()["prefix_cache_tokens"] == 0  # counted once, since the last call


def test_after_a_sync_no_cached_kv_of_the_old_weights_is_used(engine: Any, model_dir: Path) -> None:
    sample(engine, LONG)  # the prompt's blocks are now cached under the current weights
    trainer = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    engine.sync(trainer.state_dict(), version=5)
    prompt, completion, logprobs = sample(engine, LONG)
    trainer.eval()  # type: ignore[no-untyped-call]
    difference = (hf_logprobs(trainer, prompt, completion) - torch.tensor(logprobs)).abs().max()
    assert difference < 1e-4  # stale KV from the old weights would put this near the perturbation size


def test_grpo_with_the_vllm_engine_raises_the_reward(model_dir: Path, tmp_path: Path) -> None:
    """The CI-sized run of test_train.py, generating with vLLM: the reward rises and every sync lands."""
    from envhub_trainer.grpo import train

    rows = train(digits_config(model_dir, tmp_path / "run", engine="vllm", concurrency=8))
    rewards = [r["reward_mean"] for r in rows]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.2, rewards
    checksums = [r["weights_checksum"] for r in rows if "weights_checksum" in r]
    assert len(set(checksums)) == len(checksums) == 11  # vLLM's weights changed at every sync
    assert all(0 < r["prefix_cache_hit_rate"] <= 1 for r in rows)


def test_a_vllm_run_repeats_whatever_the_batching(model_dir: Path, tmp_path: Path) -> None:
    """Seeds follow the prompts, not which turns happened to share a call: 8 concurrent episodes batch
    differently from run to run, and the runs still sample alike."""
    from envhub_trainer.grpo import train

    runs = [
        train(digits_config(model_dir, tmp_path / name, engine="vllm", concurrency=8, steps=3))
        for name in ("first", "second")
    ]
    assert [r["reward_mean"] for r in runs[0]] == [r["reward_mean"] for r in runs[1]]
    # losses are sums in another order (episodes of a group arrive in any order): equal to float error
    assert [r["loss"] for r in runs[0]] == pytest.approx([r["loss"] for r in runs[1]], rel=1e-5, abs=1e-6)


def test_a_sync_that_times_out_fails_loudly(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own engine (last: a new engine in this process resets the others' Prometheus counters):
    after a failed sync an engine refuses all further work."""
    from envhub_trainer.vllm_engine import VLLMEngine, WeightSyncError

    engine = VLLMEngine(model_dir, max_new_tokens=4, seed=0, max_model_len=512, sync_timeout=0.2)
    rpc = engine.llm.collective_rpc
    reloaded = threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.0)  # past the 0.2 s sync timeout, whatever the host's speed
        try:
            return rpc(*args, **kwargs)
        finally:
            reloaded.set()

    monkeypatch.setattr(engine.llm, "collective_rpc", slow)
    state = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).state_dict()
    with pytest.raises(WeightSyncError, match=r"within 0\.2 s"):
        engine.sync(state, version=4)
    assert engine.version != 4
    with pytest.raises(WeightSyncError, match="unusable: the sync to version 4 timed out"):
        sample(engine)
    # The abandoned reload finishes before the module's other engine runs (120 s: a hang, not a guess).
    assert reloaded.wait(timeout=120), "the abandoned weight reload never finished"


def test_the_policy_records_its_model_and_sampling_with_each_episode(engine: Any, model_dir: Path) -> None:
    info = engine.policy().info()
    assert info["engine"] == "vllm" and info["model"] == str(model_dir)
    assert (info["temperature"], info["max_new_tokens"], info["seed"]) == (1.0, 12, 0)
    assert engine.policy(greedy=True).info()["temperature"] == 0.0
