"""The transformers policy with a tiny local model: exact tokens and logprobs, and token drift caught."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import envhub
from envhub.messages import user
from envhub.policies import TokenTrace, TransformersPolicy, hf
from envhub.records import Episode
from envhub.rollout.runner import run_episode
from envhub.testing.tiny_model import QWEN_STYLE_TEMPLATE
from envhub.text_format import parse_assistant_text
from envhub.trace import token_drift


def traces(episode: Episode) -> list[TokenTrace]:
    assert all(turn.tokens is not None for turn in episode.turns)
    return [turn.tokens for turn in episode.turns if turn.tokens is not None]


@pytest.mark.slow  # trains the session's tiny model first: a few seconds
async def test_plays_an_episode_with_tokens_that_extend_turn_by_turn(tiny_model: Path) -> None:
    policy = TransformersPolicy(tiny_model, temperature=0, max_new_tokens=48)
    async with envhub.make("arithmetic", steps=1) as env:
        episode = await run_episode(env, policy, seed=0)
    await policy.close()

    assert episode.error is None
    assert episode.reward == 1.0, [t.action for t in episode.turns]
    first, second = traces(episode)
    assert episode.turns[0].action.tool_calls[0].name in {"add", "subtract", "multiply"}
    for trace in (first, second):
        assert trace.sample_break is None
        assert trace.finish_reason == "stop"
        assert trace.completion_logprobs is not None
        assert len(trace.completion_logprobs) == len(trace.completion_token_ids)
    assert first.prompt_token_ids is not None and second.prompt_token_ids is not None
    sampled = first.prompt_token_ids + first.completion_token_ids
    assert second.prompt_token_ids[: len(sampled)] == sampled


@pytest.mark.slow  # trains the session's tiny model first: a few seconds
async def test_logprobs_are_those_of_a_forward_pass_over_the_exact_tokens(tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = TransformersPolicy(tiny_model, temperature=1.0, seed=3, max_new_tokens=24)
    generation = await policy.act([user("Tell me what 12 plus 30 is.")], [])
    await policy.close()
    trace = generation.tokens
    assert trace is not None and trace.prompt_token_ids is not None and trace.completion_logprobs is not None
    assert len(trace.completion_token_ids) > 0

    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()  # type: ignore[no-untyped-call]
    ids = torch.tensor([trace.prompt_token_ids + trace.completion_token_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
    start = len(trace.prompt_token_ids) - 1
    rescored = logprobs[start:].gather(-1, ids[0, start + 1 :, None])[:, 0]
    assert torch.allclose(rescored, torch.tensor(trace.completion_logprobs), atol=1e-4)

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    decoded = tokenizer.decode(trace.completion_token_ids, skip_special_tokens=True)
    assert isinstance(decoded, str) and parse_assistant_text(decoded) == generation.message


@pytest.mark.slow  # trains the session's tiny model first: a few seconds
async def test_the_same_seed_samples_the_same_tokens(tiny_model: Path) -> None:
    async def sample(seed: int) -> list[int]:
        policy = TransformersPolicy(tiny_model, temperature=1.0, seed=seed, max_new_tokens=16)
        generation = await policy.act([user("Say something.")], [])
        await policy.close()
        assert generation.tokens is not None
        return generation.tokens.completion_token_ids

    assert await sample(11) == await sample(11)


@pytest.mark.slow  # trains the session's tiny model first: a few seconds
async def test_a_template_that_rewrites_history_records_a_sample_break(tiny_model: Path) -> None:
    rewriting = QWEN_STYLE_TEMPLATE.replace(
        "(call.function.arguments | tojson)", "(call.function.arguments | tojson(indent=1))"
    )
    assert rewriting != QWEN_STYLE_TEMPLATE
    policy = TransformersPolicy(tiny_model, temperature=0, max_new_tokens=48, chat_template=rewriting)
    async with envhub.make("arithmetic", steps=1) as env:
        episode = await run_episode(env, policy, seed=0)
    await policy.close()

    first, second = traces(episode)[:2]
    assert first.sample_break is None
    assert first.prompt_token_ids is not None and second.prompt_token_ids is not None
    sampled = first.prompt_token_ids + first.completion_token_ids
    position = next(
        i for i, (a, b) in enumerate(zip(sampled, second.prompt_token_ids, strict=False)) if a != b
    )
    assert position > len(first.prompt_token_ids)  # inside the tool call the model wrote
    assert second.sample_break is not None
    assert "re-tokenised turn 2" in second.sample_break
    assert f"position {position} of {len(sampled)}" in second.sample_break


@pytest.mark.slow  # trains the session's tiny model first: a few seconds
async def test_concurrent_episodes_share_the_model_but_not_their_token_history(tiny_model: Path) -> None:
    policy = TransformersPolicy(tiny_model, temperature=0, max_new_tokens=48)

    async def play() -> Episode:
        async with envhub.make("arithmetic", steps=1) as env:
            return await run_episode(env, policy, seed=0)

    episodes = await asyncio.gather(play(), play())
    await policy.close()
    for episode in episodes:
        assert episode.reward == 1.0
        assert all(trace.sample_break is None for trace in traces(episode))


@pytest.mark.slow  # trains the session's tiny model first: a few seconds
async def test_generation_does_not_block_the_event_loop(tiny_model: Path) -> None:
    policy = TransformersPolicy(tiny_model, temperature=1.0, seed=0, max_new_tokens=32)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await policy.act([user("Count to ten.")], [])  # the first call also loads the model
    ticker.cancel()
    await policy.close()
    assert ticks > 5


def test_a_directory_without_a_model_is_refused_before_loading(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        TransformersPolicy(tmp_path)


def test_missing_libraries_are_reported_at_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(hf, "find_spec", lambda name: None if name == "torch" else object())
    with pytest.raises(ImportError, match=r"needs torch: pip install 'envhub-core\[hf\]'"):
        TransformersPolicy(tmp_path)


def test_token_drift_names_the_turn_and_the_position() -> None:
    assert token_drift(None, [1, 2], 1) is None
    assert token_drift([1, 2], [1, 2, 3], 2) is None
    reason = token_drift([1, 2, 3], [1, 5, 3, 4], 2)
    assert reason is not None and "turn 2" in reason and "position 1 of 3" in reason
    shorter = token_drift([1, 2, 3], [1, 2], 3)
    assert shorter is not None and "history was dropped" in shorter


@pytest.mark.parametrize("module", ["torch", "transformers"])
def test_importing_envhub_does_not_import_heavy_libraries(module: str) -> None:
    code = f"import envhub, envhub.policies, sys; sys.exit({module!r} in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.slow  # trains the session's tiny model first: a few seconds
async def test_an_image_the_local_model_cannot_see_fails_the_episode_and_says_why(tiny_model: Path) -> None:
    policy = TransformersPolicy(tiny_model, temperature=0, max_new_tokens=8)
    async with envhub.make("vision-v0", kind="count-shapes") as env:
        episode = await run_episode(env, policy, seed=0)
    await policy.close()
    assert episode.error is not None
    assert "rendered as text only" in episode.error.message and "openai policy" in episode.error.message
