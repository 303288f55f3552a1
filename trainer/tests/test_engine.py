"""The HF engine: batched generation gives the tokens of one call per turn, and sync replaces weights."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from envhub_trainer.engine import TransformersEngine, weights_checksum
from transformers import AutoModelForCausalLM

from envhub.messages import user
from envhub.policies.base import Generation, TokenTrace
from envhub.policies.hf import TransformersPolicy

PROMPTS = ["Say a number like 7.", "What is 12 plus 30? Reply with the number only.", "Hi", "Count: 1 2 3"]


async def traces(policy: TransformersPolicy) -> list[TokenTrace]:
    generations = await asyncio.gather(*(policy.for_episode(None).act([user(p)], []) for p in PROMPTS))  # type: ignore[arg-type]
    out = [g.tokens for g in generations if isinstance(g, Generation)]
    assert len(out) == len(PROMPTS) and all(t is not None for t in out)
    return [t for t in out if t is not None]


def test_batched_greedy_generation_equals_one_call_per_prompt(tiny_model: Path) -> None:
    one = TransformersPolicy(tiny_model, temperature=0, max_new_tokens=12, batch_size=1)
    many = TransformersPolicy(tiny_model, temperature=0, max_new_tokens=12, batch_size=4, max_wait=0.2)
    alone, batched = asyncio.run(traces(one)), asyncio.run(traces(many))
    assert one.generate_calls == 4 and many.generate_calls == 1  # the four turns shared one call
    assert len({len(t.prompt_token_ids or []) for t in alone}) > 1  # prompts of different lengths: padded
    for a, b in zip(alone, batched, strict=True):
        assert a.prompt_token_ids == b.prompt_token_ids
        assert a.completion_token_ids == b.completion_token_ids
        assert a.finish_reason == b.finish_reason
        assert a.completion_logprobs is not None and b.completion_logprobs is not None
        assert b.completion_logprobs == pytest.approx(a.completion_logprobs, abs=1e-5)


def test_batched_sampled_logprobs_are_the_models(tiny_model: Path) -> None:
    """Sampled in a batch, each completion's logprobs still equal a plain forward pass over its tokens."""
    policy = TransformersPolicy(
        tiny_model, temperature=1.0, seed=5, max_new_tokens=10, batch_size=4, max_wait=0.2
    )
    model = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True).eval()  # type: ignore[no-untyped-call]
    for trace in asyncio.run(traces(policy)):
        assert trace.prompt_token_ids is not None and trace.completion_logprobs is not None
        ids = torch.tensor([trace.prompt_token_ids + trace.completion_token_ids])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
        start = len(trace.prompt_token_ids) - 1
        rescored = logprobs[start:].gather(-1, ids[0, start + 1 :, None])[:, 0]
        assert rescored.tolist() == pytest.approx(trace.completion_logprobs, abs=1e-4)
    assert policy.generate_calls == 1


def test_engine_sync_makes_its_weights_equal_the_trainers(tiny_model: Path) -> None:
    engine = TransformersEngine(tiny_model, max_new_tokens=2)
    trainer = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True)
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(0.01)
    before = engine.checksum()
    assert before != weights_checksum(trainer.state_dict())
    engine.sync(trainer.state_dict(), version=7)
    assert engine.checksum() == weights_checksum(trainer.state_dict())
    assert engine.version == 7
    state = json.loads(json.dumps(engine.rng_state()))  # as a checkpoint's state.json keeps it
    engine.set_rng_state(state)
    assert json.loads(json.dumps(engine.rng_state())) == state
