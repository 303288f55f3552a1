"""The vLLM engine's CPU KV cache is sized from the generation batch, and a batch that needs more than
that still generates right (vLLM holds requests back or preempts them; the engine counts preemptions).

The engine tests run in vLLM's own venv (`make test-vllm`); the sizing arithmetic runs everywhere.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from envhub_trainer.testing import hf_logprobs
from envhub_trainer.vllm_engine import kv_cache_blocks
from transformers import AutoModelForCausalLM

from envhub.messages import user

without_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed in this venv: `make test-vllm` runs these in one that has it",
)
SIZING: dict[str, Any] = {"batch_size": 2, "prompt_tokens": 64, "max_model_len": 512, "block_size": 32}
NEW_TOKENS = 40


def test_blocks_cover_the_batch_and_one_longest_sequence() -> None:
    # 32 sequences of 50 + 32 tokens: 3 blocks of 32 each, plus vLLM's null block
    assert (
        kv_cache_blocks(batch_size=32, prompt_tokens=50, max_new_tokens=32, max_model_len=2048, block_size=32)
        == 97
    )
    # a small batch still fits one sequence of max_model_len, which vLLM needs to start
    assert (
        kv_cache_blocks(batch_size=1, prompt_tokens=10, max_new_tokens=10, max_model_len=2048, block_size=32)
        == 65
    )
    # no sequence is longer than max_model_len, however long the prompt estimate
    assert (
        kv_cache_blocks(batch_size=4, prompt_tokens=4000, max_new_tokens=64, max_model_len=256, block_size=32)
        == 33
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from envhub.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(tmp_path_factory.mktemp("vllm-kv") / "model", hidden_size=128, heads=2)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Any:
    from envhub_trainer.vllm_engine import VLLMEngine

    return VLLMEngine(model_dir, max_new_tokens=NEW_TOKENS, temperature=1.0, seed=0, **SIZING)


@pytest.mark.vllm
@without_vllm
def test_the_cache_vllm_allocates_is_the_batchs(engine: Any, model_dir: Path) -> None:
    from envhub_trainer.vllm_engine import kv_bytes_per_token

    blocks = kv_cache_blocks(max_new_tokens=NEW_TOKENS, **SIZING)
    assert engine.kv_cache_tokens == blocks * SIZING["block_size"]
    assert engine.llm.llm_engine.vllm_config.cache_config.num_gpu_blocks == blocks

    def allocated(worker: Any) -> int:
        return sum(t.numel() * t.element_size() for t in worker.model_runner.kv_caches)

    [resident] = engine.llm.collective_rpc(allocated)
    assert resident == engine.kv_cache_tokens * kv_bytes_per_token(model_dir, "float32")


@pytest.mark.vllm
@without_vllm
def test_a_batch_larger_than_the_cache_still_generates_right(engine: Any, model_dir: Path) -> None:
    """8 distinct prompts of 8 blocks each against a cache of 17 blocks: at most two run at once, and
    decoding past the 8th block preempts one. Every completion is whole and has the model's logprobs."""
    long = "Count the sheep in the field, one by one, and say how many there are. " * 4
    prompts = [engine.prompt_ids([user(f"{i} {long}")], []) for i in range(8)]
    blocks = SIZING["block_size"]
    needed = sum(-(-(len(p) + NEW_TOKENS) // blocks) for p in prompts)
    assert needed > 2 * engine.kv_cache_tokens // blocks  # the batch needs more than twice the cache
    engine.metrics()  # count from here
    results = engine.generate_ids(prompts, 1.0)
    assert engine.metrics()["kv_cache_preemptions"] > 0
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    model.eval()  # type: ignore[no-untyped-call]
    for prompt, (completion, logprobs, stopped) in zip(prompts, results, strict=True):
        assert stopped or len(completion) == NEW_TOKENS
        assert torch.allclose(hf_logprobs(model, prompt, completion), torch.tensor(logprobs), atol=1e-4)
