"""Reward hacks aimed at what HumanEval's tests do differently from the built-in tasks, performed
through `humaneval-v0`'s real `step`; each must earn no more than an honest wrong answer."""

from __future__ import annotations

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
