"""Replies that hedge or game Reasoning Gym's scorers, played through the env's real `step`.

Each must score what an honest grader gives a wrong answer (0), while the reference answer keeps 1.0
(test_rgym_datasets plays it on every dataset).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from envhub_reasoning_gym import env_id
from envhub_reasoning_gym.env import generate, reference_answer
from reasoning_gym.factory import DATASETS  # type: ignore[import-untyped]

import envhub

HEDGED = [
    "gcd",
    "isomorphic_strings",
    "syllogism",
    "ransom_note",
    "basic_arithmetic",
    "caesar_cipher",
    "mahjong_puzzle",
    "course_schedule",
    "tsumego",
    "codeio",
    "manipulate_matrix",
]
"""Datasets whose scorer gave a reply that contains the answer len(answer)/len(reply): Reasoning Gym's
default score_answer and the custom ones that copy its containment credit."""


async def played(name: str, seed: int) -> tuple[envhub.Env, str, str]:
    """The env reset to `seed`, the item's answer and another item's different answer."""
    env = envhub.make(env_id(name))
    await env.reset(seed=seed)
    entry: dict[str, Any] = env.entry  # type: ignore[attr-defined]
    right = reference_answer(entry)
    assert right is not None
    for index in range(1, 50):
        other = reference_answer(generate(env.dataset, name, (seed + index) % env.dataset.size))  # type: ignore[attr-defined]
        if other is not None and other.strip() != right.strip():
            return env, right, other
    raise AssertionError(f"{name}: no other answer in 50 items")


@pytest.mark.parametrize("name", HEDGED)
@pytest.mark.parametrize("form", ["{wrong} or {right}", "{right}\n{wrong}", "{right} {right}", "{right}."])
async def test_a_reply_holding_the_answer_among_other_text_scores_zero(name: str, form: str) -> None:
    """'True False' was a sure 0.4-0.5 on every yes/no item, a list of candidates a share of 1."""
    for seed in range(2):
        env, right, wrong = await played(name, seed)
        result = await env.step(f"<answer>{form.format(right=right, wrong=wrong)}</answer>")
        assert result.terminated and result.reward == 0.0, (seed, result.info["reward_components"])
        if seed == 0:  # every dataset here paid this item's hedges before (codeio's seed 1 does not)
            assert "holds the answer among other text" in result.info["reward_notes"]["score"]


async def test_game_of_life_halting_needs_the_right_truth_value() -> None:
    """Its scorer compared bool(reply) with bool("False"): any non-empty reply scored 1.0."""
    for seed in range(4):
        env, right, _ = await played("game_of_life_halting", seed)
        wrong = "False" if right == "True" else "True"
        for reply, expected in [("banana", 0.0), (wrong, 0.0), (right.lower(), 1.0), (f" {right} ", 1.0)]:
            await env.reset(seed=seed)
            result = await env.step(f"<answer>{reply}</answer>")
            assert result.reward == expected, (seed, reply)


RUNS_THE_REPLY = [
    "binary_matrix",  # eval(reply)
    "n_queens",
    "spiral_matrix",
    "string_insertion",
    "countdown",  # sympy's parse_expr(reply), which evals it
    "puzzle24",
    "simple_integration",
    "intermediate_integration",
    "polynomial_multiplication",
]
"""Datasets whose scorer ran the reply as Python in the grading process."""


@pytest.fixture
def scorers_restored() -> Iterator[None]:
    """Puts every dataset class's score_answer back, so a test that fails cannot poison the others."""
    saved = {cls: cls.__dict__.get("score_answer") for cls, _ in DATASETS.values()}
    yield
    for cls, method in saved.items():
        if cls.__dict__.get("score_answer") is not method:
            setattr(cls, "score_answer", method)  # noqa: B010


@pytest.mark.usefixtures("scorers_restored")
@pytest.mark.parametrize("name", RUNS_THE_REPLY)
async def test_a_reply_the_scorer_would_run_cannot_rewrite_the_scorer(name: str) -> None:
    """One reply replaced the dataset's score_answer with `lambda: 1.0`: every later episode of the
    process scored 1.0 whatever it answered."""
    cls = DATASETS[name][0]
    payload = (
        f"setattr(__import__('{cls.__module__}',fromlist=['x']).{cls.__name__},'score_answer',"
        "eval('lambda s,a,e:1.0'))"
    )
    env, _, wrong = await played(name, 0)
    first = await env.step(f"<answer>{payload}</answer>")
    assert first.reward < 0.05
    await env.reset(seed=0)
    second = await env.step(f"<answer>{wrong}</answer>")
    assert second.reward < 1.0
    assert cls.__dict__.get("score_answer") is not None


@pytest.mark.parametrize(
    ("name", "reply"),
    [
        ("binary_matrix", "9**9**9**9"),  # eval computed the tower: the step never returned
        ("countdown", "9**9**9**9"),  # so did sympy
        ("countdown", "1e999999"),  # about a minute in sympy's Float
        ("puzzle24", "exp(exp(exp(100)))"),
        ("intermediate_integration", "exp(exp(exp(100)))*x"),
        ("simple_integration", "x**(9**9**9)"),
        ("polynomial_multiplication", "(9**99)**(9**99)"),
    ],
)
async def test_a_reply_that_would_keep_the_scorer_busy_scores_zero(name: str, reply: str) -> None:
    env, _, _ = await played(name, 0)
    result = await env.step(f"<answer>{reply}</answer>")
    assert result.reward <= 0.01


@pytest.mark.parametrize(
    ("name", "reply"),
    [
        ("puzzle24", "6*4*1*1"),  # 24 from four numbers in range, but not the item's: 1.0 on every item
        ("complex_arithmetic", "nan"),  # min(1.0, exp(-nan)) is 1.0: every item
        ("complex_arithmetic", "NaN + nani"),
        ("coin_flip", "0"),  # prefix credit over the shorter string: "0" matched "0.3125" in full
    ],
)
async def test_a_reply_that_answers_no_item_scores_zero(name: str, reply: str) -> None:
    """Each of these scored 1.0 from the dataset's own scorer on items it does not answer."""
    paid = 0
    for seed in range(6):
        env, right, _ = await played(name, seed)
        if reply.strip() == right.strip():
            continue
        paid += env.dataset.score_answer(reply, env.entry) == 1.0  # type: ignore[attr-defined]
        result = await env.step(f"<answer>{reply}</answer>")
        assert result.reward == 0.0, (seed, right)
    assert paid >= 3  # the dataset's own scorer gives it full marks on most items


SEVERAL_PAID = [
    "advanced_geometry",
    "chain_sum",
    "fraction_simplification",
    "futoshiki",
    "gsm_symbolic",
    "letter_jumble",
    "polynomial_equations",
    "products",
    "rush_hour",
    "sokoban",
    "spell_backward",
    "sudoku",
    "time_intervals",
    "word_sorting",
]
"""Datasets whose own scorer paid a reply naming the answer and another item's answer ("28080 or
28081"): 1.0 in ten of them (the scorer reads the first or the last candidate, or drops the rest), a
share in the others, though docs/rewards.md said such a reply scores 0."""
SEVERAL = [
    "{wrong} or {right}",
    "{right} or {wrong}",
    "{right}, {wrong}",
    "either {wrong} or {right}",
    "{wrong}\n{right}",
]


@pytest.mark.parametrize("name", SEVERAL_PAID)
async def test_a_reply_naming_several_answers_scores_zero_with_a_note(name: str) -> None:
    paid = 0
    for seed in range(3):
        for form in SEVERAL:
            env, right, wrong = await played(name, seed)
            reply = form.format(right=right, wrong=wrong)
            before = env.dataset.score_answer(reply, env.entry)  # type: ignore[attr-defined]
            paid += before > 0
            result = await env.step(f"<answer>{reply}</answer>")
            assert result.reward == 0.0, (seed, form, result.info["reward_components"])
            if before > 0:
                assert "score" in result.info.get("reward_notes", {}), (seed, form)
    assert paid >= 1  # the dataset's own scorer pays at least one of these


@functools.cache
def _sweep() -> ModuleType:
    """benchmarks/constant_sweep.py, whose 30 constants and base rate these tests share."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "constant_sweep.py"
    spec = importlib.util.spec_from_file_location("constant_sweep", path)
    assert spec is not None and spec.loader is not None, f"{path} is missing"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


async def test_rectangle_counts_closeness_credit_no_longer_pays_a_constant() -> None:
    """Its scorer pays 0.8 * (1 - distance / 5) for a count within 4: "5" averaged 0.40 over 20 seeds,
    right on 1 of them."""
    env = envhub.make(env_id("rectangle_count"))
    total, credit, right = 0.0, 0.0, 0
    for seed in range(20):
        await env.reset(seed=seed)
        result = await env.step("<answer>5</answer>")
        total += result.reward
        credit += result.info["reward_components"]["partial_credit"]
        right += env.entry["answer"] == "5"  # type: ignore[attr-defined]
    assert total == right  # full marks where "5" is the count, nothing elsewhere
    assert credit / 20 > 0.3  # the dataset's own closeness credit, still recorded


@pytest.mark.parametrize("name", sorted(DATASETS))
async def test_no_constant_earns_more_than_its_base_rate(name: str) -> None:
    """Each of the sweep's 30 constants, on 4 seeds: paid no more than the share of items it answers."""
    sweep = _sweep()
    row = await sweep.reasoning_gym_row(name, 4)
    assert not row.paid(), {c: (row.means[c], row.rates[c]) for c in row.paid()}


def test_puzzle24s_number_check_reads_a_number_too_long_to_convert_as_wrong() -> None:
    """The check that a reply uses the item's own numbers converted each with `int()`, which raises past
    CPython's 4300 digits; the bounded reader reads such a number as huge, so the check says no."""
    from envhub_reasoning_gym.guards import puzzle24

    entry = {"metadata": {"numbers": [1, 2, 3, 4]}}
    assert not puzzle24("1 + 2 + 3 * " + "7" * 5000, entry)
    assert puzzle24("(1 + 2 + 3) * 4", entry)
