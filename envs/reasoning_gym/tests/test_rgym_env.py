"""The Reasoning Gym envs: options checked against the dataset's config, items as Reasoning Gym makes
them, replies read by Reasoning Gym's own <answer> convention and scored by its own score_answer, and an
episode's round trip through the Parquet store."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import reasoning_gym  # type: ignore[import-untyped]
from envhub_reasoning_gym import dataset_names, env_id, options

import envhub
from envhub.policies import OraclePolicy, RandomPolicy
from envhub.rollout import rollout
from envhub.rollout.kwargs import check_env_kwargs
from envhub.store import read_episodes


async def reply(env_name: str, text: str, seed: int = 0, **kwargs: Any) -> envhub.StepResult:
    env = envhub.make(env_id(env_name), **kwargs)
    await env.reset(seed=seed)
    return await env.step(text)


def test_every_option_is_a_config_field_and_none_is_shadowed() -> None:
    for name in dataset_names():
        cls = envhub.registry._load(envhub.registry.resolve(env_id(name)))
        params = list(inspect.signature(cls).parameters)
        fields = [f for f in params if f != "system_prompt"]
        config = reasoning_gym.factory.DATASETS[name][1]
        assert fields == [f.name for f in config.__dataclass_fields__.values()], name
        assert "system_prompt" not in config.__dataclass_fields__, name
        assert list(options(name)) == params


async def test_seed_s_plays_item_s_mod_size_as_reasoning_gym_makes_it() -> None:
    dataset = reasoning_gym.create_dataset("chain_sum", size=7, seed=3, max_terms=3)
    env = envhub.make(env_id("chain_sum"), size=7, seed=3, max_terms=3)
    for seed in (0, 5, 9, 7 * 1000 + 2):
        observation, info = await env.reset(seed=seed)
        assert observation[-1].text == dataset[seed % 7]["question"]
        assert info["index"] == seed % 7 and info["dataset"] == "chain_sum"


async def test_same_seed_same_prompt_and_seeds_vary() -> None:
    prompts = []
    for seed in (4, 4, 5, 6):
        observation, _ = await envhub.make(env_id("knights_knaves")).reset(seed=seed)
        prompts.append(observation[-1].text)
    assert prompts[0] == prompts[1]
    assert len(set(prompts[1:])) == 3


def test_the_dataset_seed_is_fixed_by_default_so_two_envs_agree() -> None:
    """Reasoning Gym's own default seed is random per dataset object; envhub's must replay."""
    first, second = envhub.make(env_id("gcd")), envhub.make(env_id("gcd"))
    assert first.dataset[0] == second.dataset[0]  # type: ignore[attr-defined]


def test_a_wrong_option_names_the_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"no option 'min_terms'.*min_numbers, max_numbers"):
        envhub.make(env_id("countdown"), min_terms=3)
    with pytest.raises(TypeError, match=r"min_terms=.*does not fit its type"):
        envhub.make(env_id("chain_sum"), min_terms="many")
    with pytest.raises(TypeError, match="no option 'bogus'"):
        check_env_kwargs(env_id("chain_sum"), {"bogus": 1})
    with pytest.raises(TypeError, match="min_terms is int"):
        check_env_kwargs(env_id("chain_sum"), {"min_terms": "many"})


def test_values_the_config_refuses_are_explained() -> None:
    with pytest.raises(ValueError, match="refused its options: min_terms must be positive"):
        envhub.make(env_id("chain_sum"), min_terms=0)
    with pytest.raises(ValueError, match="size must be at least 1"):
        envhub.make(env_id("countdown"), size=0)  # countdown's own config lets 0 through
    with pytest.raises(ValueError, match=r"Must specify at least one dataset; for example datasets="):
        envhub.make(env_id("composite"))
    with pytest.raises(ValueError, match="choose one of"):
        envhub.make(env_id("chain_sum"), system_prompt="verbose")


def test_options_are_converted_to_the_fields_types() -> None:
    """A JSON list (all the command line can write) becomes the tuple the config expects."""
    env = envhub.make(env_id("countdown"), operators=["+", "-"], min_numbers=3, max_numbers=3)
    assert env.dataset.config.operators == ("+", "-")  # type: ignore[attr-defined]
    mixture = [{"name": "gcd", "weight": 2, "config": {"max_value": 50}}]
    composite = envhub.make(env_id("composite"), datasets=mixture)
    assert composite.dataset.config.datasets[0].weight == 2  # type: ignore[attr-defined]


async def test_the_answer_is_the_last_answer_block_as_reasoning_gym_reads_it() -> None:
    env = envhub.make(env_id("gcd"))
    await env.reset(seed=1)
    right = env.entry["answer"]  # type: ignore[attr-defined]
    cases = {
        f"Thinking... <answer>0</answer> no wait, <answer>{right}</answer>": 1.0,
        f"<answer>{right}</answer> then <answer>0</answer>": 0.0,
        f"The answer is {right}.": 0.0,  # no block: Reasoning Gym scores None
        f"<answer> {right} </answer>": 1.0,
    }
    for text, expected in cases.items():
        result = await reply("gcd", text, seed=1)
        assert result.terminated and result.reward == expected, text
        assert result.info["reward_components"]["answer_tagged"] == float("<answer>" in text)


async def test_partial_credit_is_the_datasets_own_unless_it_pays_a_hedge() -> None:
    """mini_sudoku's credit for a partly right grid is kept; letter_jumble's (which also paid a long
    constant string) is recorded in `partial_credit` only; the default scorer's len(answer)/len(reply)
    for a reply that contains the answer is not (test_rgym_reward_hacks)."""
    env = envhub.make(env_id("letter_jumble"))
    await env.reset(seed=0)
    words = env.entry["answer"].split()  # type: ignore[attr-defined]
    dataset_says = env.dataset.score_answer(" ".join(["xyzzy", *words[1:]]), env.entry)  # type: ignore[attr-defined]
    assert 0.0 < dataset_says < 1.0
    result = await reply("letter_jumble", "<answer>" + " ".join(["xyzzy", *words[1:]]) + "</answer>")
    assert result.info["reward_components"]["partial_credit"] == pytest.approx(dataset_says)
    assert result.reward == 0.0  # letter_jumble's credit also paid a constant: guards.FULL_MARKS_ONLY
    sudoku = envhub.make(env_id("mini_sudoku"))
    await sudoku.reset(seed=0)
    grid = sudoku.entry["answer"]  # type: ignore[attr-defined]
    partly = grid.replace(grid[0], "1" if grid[0] != "1" else "2", 1)
    own = sudoku.dataset.score_answer(partly, sudoku.entry)  # type: ignore[attr-defined]
    assert 0.0 < own < 1.0
    assert (await reply("mini_sudoku", f"<answer>{partly}</answer>")).reward == pytest.approx(own)
    caesar = envhub.make(env_id("caesar_cipher"))
    await caesar.reset(seed=0)
    right = caesar.entry["answer"]  # type: ignore[attr-defined]
    assert caesar.dataset.score_answer(f"{right} {right}", caesar.entry) > 0  # type: ignore[attr-defined]
    assert (await reply("caesar_cipher", f"<answer>{right} {right}</answer>")).reward == 0.0


async def test_a_reply_that_crashes_the_scorer_scores_zero_with_the_reason() -> None:
    """boxnet's score_answer raises TypeError on a bare number; the episode ends scored 0, not in error."""
    result = await reply("boxnet", "<answer>1</answer>")
    assert result.terminated and result.reward == 0.0
    assert "score_answer raised TypeError" in result.info["reward_notes"]["score"]


async def test_one_episode_round_trips_through_the_store(tmp_path: Path) -> None:
    for policy, name in [(OraclePolicy(), "graph_color"), (RandomPolicy(seed=1), "word_ladder")]:
        out = tmp_path / name
        result = await rollout(env_id(name), policy, episodes=1, out=out, env_kwargs={"size": 50})
        (stored,) = read_episodes(out)
        (played,) = result.episodes
        assert stored.env_id == env_id(name) and stored.seed == 0
        assert stored.reward == played.reward and stored.reward_components == played.reward_components
        assert [m.text for m in stored.messages] == [m.text for m in played.messages]
        assert stored.provenance.package == "envhub-reasoning-gym"
    assert read_episodes(tmp_path / "graph_color")[0].reward == 1.0


async def test_list_functions_items_replay_although_its_helper_draws_from_the_global_random() -> None:
    """Item 0 of list_functions (seed 0) uses `create_random_odd_numbers`, which calls `random.randint`:
    without envhub's reseeded binding, two resets to seed 0 give different numbers."""
    first, second = envhub.make(env_id("list_functions")), envhub.make(env_id("list_functions"))
    prompt, _ = await first.reset(seed=0)
    await second.reset(seed=31)
    again, _ = await second.reset(seed=0)
    assert first.dataset.task_indices[0] == 14  # type: ignore[attr-defined]
    assert prompt[-1].text == again[-1].text


def test_the_list_functions_helper_still_needs_the_shim() -> None:
    """When reasoning-gym draws these numbers from the item's Random, drop UNSEEDED_HELPERS."""
    from reasoning_gym.induction.list_functions import generators  # type: ignore[import-untyped]

    source = inspect.getsource(generators.create_random_odd_numbers)
    assert "random.randint(" in source and "rng" not in source
