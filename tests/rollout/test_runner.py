"""The minimal batch runner: records every episode, keeps infrastructure errors apart from agent mistakes."""

from __future__ import annotations

import random

import pytest

import envhub
from envhub.policies import OraclePolicy, OraclePolicyError, RandomPolicy, ScriptedPolicy, load_policy
from envhub.policies.human import parse_human_line
from envhub.rollout import run_batch, run_episode, summarize


async def test_oracle_batch_is_complete_seeded_and_solved() -> None:
    episodes = (await run_batch("arithmetic", OraclePolicy(), episodes=12, seed=100)).episodes
    assert [e.episode_id for e in episodes] == [f"{i:06d}" for i in range(12)]
    assert [e.seed for e in episodes] == list(range(100, 112))
    assert all(e.reward == 1.0 and e.terminated and e.error is None for e in episodes)
    first = episodes[0]
    assert first.env_id == "arithmetic-v0" and first.provenance.package == "envhub-games"
    assert first.messages[0].role == "system" and first.messages[-1].role == "assistant"
    assert len(first.turns) == 4


async def test_same_seed_gives_identical_records() -> None:
    a = (await run_batch("guess-number", RandomPolicy(seed=3), episodes=4, seed=7)).episodes
    b = (await run_batch("guess-number", RandomPolicy(seed=3), episodes=4, seed=7)).episodes
    assert [e.messages for e in a] == [e.messages for e in b]


class Flaky(envhub.SingleTurnEnv):
    def setup(self, rng: random.Random) -> str:
        return "Say anything."

    async def react(self, message: envhub.Message) -> envhub.Reaction:
        raise ConnectionError("grader went away")


async def test_env_crash_is_recorded_as_infrastructure_error() -> None:
    episode = await run_episode(Flaky(), ScriptedPolicy(["hello"]), seed=0)
    assert episode.error is not None and episode.error.kind == "env_error"
    assert episode.error.message == "ConnectionError: grader went away"
    assert episode.prompt[0].text == "Say anything."


async def test_policy_failure_is_recorded_as_policy_error() -> None:
    env = envhub.make("guess-number")
    episode = await run_episode(env, ScriptedPolicy(["0"]), seed=0)  # 0 is never the secret
    assert episode.error is not None and episode.error.kind == "policy_error"
    assert "the script has only 1 actions" in episode.error.message
    assert len(episode.turns) == 1 and not episode.terminated


async def test_oracle_without_reference_solution_says_what_to_do() -> None:
    class NoSolution(envhub.SingleTurnEnv):
        def setup(self, rng: random.Random) -> str:
            return "?"

    episode = await run_episode(NoSolution(), OraclePolicy(), seed=0)
    assert episode.error is not None and "has no reference solution" in episode.error.message
    with pytest.raises(OraclePolicyError, match="must be bound"):
        await OraclePolicy().act([], [])


async def test_malformed_agent_actions_are_part_of_the_episode_not_errors() -> None:
    episode = await run_episode(envhub.make("countdown"), ScriptedPolicy([""]), seed=0)
    assert episode.error is None and episode.truncated and episode.reward == 0.0
    assert episode.turns[0].info["error"]["kind"] == "malformed_action"


def test_summary_counts_solved_errors_and_components() -> None:
    ok = envhub.records.Episode(
        episode_id="0", env_id="x", policy="p", prompt=[], reward=1.0, reward_components={"a": 1.0}
    )
    failed = envhub.records.Episode.model_validate(
        {
            **ok.model_dump(),
            "reward": 0.0,
            "reward_components": {"a": 0.0},
            "error": {"kind": "env_error", "message": "m"},
        }
    )
    summary = summarize([ok, failed], wall_seconds=2.0)
    assert (summary.solved, summary.reward_mean, summary.errors) == (0.5, 0.5, {"env_error": 1})
    assert summary.components == {"a": 0.5} and summary.episodes_per_second == 1.0
    with pytest.raises(ValueError, match="no episodes"):
        summarize([], wall_seconds=1.0)


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("oracle", "OraclePolicy"),
        ("random", "RandomPolicy"),
        ("random:4", "RandomPolicy"),
        ("human", "HumanPolicy"),
    ],
)
def test_load_policy(spec: str, kind: str) -> None:
    assert type(load_policy(spec)).__name__ == kind


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpt-9", "unknown policy 'gpt-9'; expected one of: oracle, random"),
        ("random:x", "random policy seed must be an integer"),
        ("scripted:/nonexistent.json", "cannot read the script /nonexistent.json"),
    ],
)
def test_bad_policy_specs_are_explained(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_policy(spec)


def test_human_tool_call_syntax() -> None:
    message = parse_human_line('/call add {"a": 1, "b": 2}', turn=3)
    assert isinstance(message, envhub.Message)
    assert (message.tool_calls[0].name, message.tool_calls[0].arguments) == ("add", '{"a": 1, "b": 2}')
    assert parse_human_line("just text", turn=0) == "just text"
