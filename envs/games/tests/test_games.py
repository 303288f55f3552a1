"""envhub-games: every task is seeded, solvable by its oracle, and scored only on a correct answer."""

from __future__ import annotations

from fractions import Fraction

import pytest
from envhub_games.answers import last_integer
from envhub_games.countdown import InvalidExpression, evaluate, final_line

import envhub
from envhub.policies import OraclePolicy, RandomPolicy, ScriptedPolicy
from envhub.rollout import run_batch, run_episode

GAMES = ["arithmetic-v0", "guess-number-v0", "countdown-v0"]


@pytest.mark.parametrize("env_id", GAMES)
async def test_oracle_solves_every_seed(env_id: str) -> None:
    episodes = (await run_batch(env_id, OraclePolicy(), episodes=200, seed=0)).episodes
    assert [e.reward for e in episodes] == [1.0] * 200
    assert all(e.terminated and not e.truncated for e in episodes)


@pytest.mark.parametrize("env_id", GAMES)
async def test_same_seed_same_episode_and_seeds_vary(env_id: str) -> None:
    """The whole oracle-played conversation, hidden state included, is a function of the seed."""
    played = []
    for seed in (1, 1, 2, 3, 4):
        episode = await run_episode(envhub.make(env_id), OraclePolicy(), seed=seed)
        played.append(tuple(m.model_dump_json() for m in episode.messages))
    assert played[0] == played[1]
    assert len(set(played[1:])) > 1


@pytest.mark.parametrize("env_id", GAMES)
async def test_random_policy_scores_below_the_oracle(env_id: str) -> None:
    episodes = (await run_batch(env_id, RandomPolicy(seed=0), episodes=50, seed=0)).episodes
    assert sum(e.reward for e in episodes) / len(episodes) < 0.2
    assert all(e.error is None for e in episodes)


async def test_arithmetic_rejects_a_wrong_answer_and_accepts_prose_around_a_right_one() -> None:
    env = envhub.make("arithmetic", steps=2)
    await env.reset(seed=9)
    assert env.max_turns == 5
    wrong = await env.step(str(env.result + 1))  # type: ignore[attr-defined]
    assert wrong.terminated and wrong.reward == 0.0
    await env.reset(seed=9)
    right = await env.step(f"The result is {env.result:,}.")  # type: ignore[attr-defined]
    assert right.reward == 1.0 and right.info["reward_components"]["tool_calls"] == 0.0


async def test_guess_number_answers_higher_lower_and_asks_for_a_number() -> None:
    env = envhub.make("guess-number")
    await env.reset(seed=4)
    secret = env.secret  # type: ignore[attr-defined]
    assert 1 < secret < 100
    low = await env.step(str(secret - 1))
    assert low.observation[0].text == "higher"
    high = await env.step(str(secret + 1))
    assert high.observation[0].text == "lower"
    vague = await env.step("maybe the middle one?")
    assert vague.observation[0].text == "Please reply with a single integer between 1 and 100."


async def test_guess_number_truncates_when_out_of_guesses() -> None:
    episode = await run_episode(envhub.make("guess-number", max_turns=2), ScriptedPolicy(["0", "0"]), seed=0)
    assert episode.truncated and episode.reward == 0.0
    assert episode.reward_components == {"guesses_used": 2.0, "solved": 0.0}


@pytest.mark.parametrize(
    ("expression", "numbers", "value"),
    [
        ("(25 - 5) * 4", [25, 5, 4, 7], 80),
        ("100 / 4 + 3", [100, 4, 3], 28),
        ("7", [7], 7),
        ("3/2", [3, 2], 1.5),
    ],
)
def test_countdown_evaluates_legal_expressions(expression: str, numbers: list[int], value: float) -> None:
    assert evaluate(expression, numbers) == Fraction(value)


@pytest.mark.parametrize(
    ("expression", "numbers", "message"),
    [
        ("5 * 5", [5, 3], r"5 is not available \(numbers left: \[3\]\)"),
        ("2 ** 10", [2, 10], "only integers and"),
        ("__import__('os')", [1], "only integers and"),
        ("4 / (2 - 2)", [4, 2, 2], "division by zero"),
        ("3 +", [3], "not an arithmetic expression"),
        ("2.5 * 2", [2], "only integers and"),
    ],
)
def test_countdown_refuses_illegal_expressions(expression: str, numbers: list[int], message: str) -> None:
    with pytest.raises(InvalidExpression, match=message):
        evaluate(expression, numbers)


def test_answer_extraction() -> None:
    assert final_line("I think:\n`(3 + 4) * 2` = 14\n") == "(3 + 4) * 2"
    assert last_integer("first 12 then -1,234.") == -1234
    assert last_integer("none") is None


@pytest.mark.parametrize(("kwargs", "message"), [({"steps": 0}, "steps must be at least 1")])
def test_bad_options_are_explained(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        envhub.make("arithmetic", **kwargs)
    with pytest.raises(ValueError, match="low must be below high"):
        envhub.make("guess-number", low=5, high=5)
    with pytest.raises(ValueError, match="numbers must be between 2 and 6"):
        envhub.make("countdown", numbers=9)
