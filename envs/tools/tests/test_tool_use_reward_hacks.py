"""A reply built to crash the grader, played through the env's real `step`: it must score the 0 of a wrong
answer, not end the episode in an error the runner would retry or drop."""

from __future__ import annotations

from envhub_tools.env import ToolUse

import envhub


async def test_a_number_too_long_to_convert_scores_zero() -> None:
    """5000 digits: `Fraction()` refuses strings past CPython's 4300-digit limit with ValueError."""
    env = envhub.make("tool-use", kind="search-compute")
    try:
        await env.reset(seed=0)
        result = await env.step("The answer is " + "7" * 5000)
        assert result.terminated and result.reward == 0.0
    finally:
        await env.close()


async def test_a_report_file_too_long_to_convert_scores_zero() -> None:
    """write-report reads the number back from the file: 5000 digits there (under the 64 KiB read)
    made `int()` raise past CPython's 4300-digit limit, crashing the reward."""
    env = ToolUse(kind="write-report")
    try:
        await env.reset(seed=0)
        path = env.task.output_file
        call = envhub.Message(
            role="assistant",
            tool_calls=[
                envhub.ToolCall.create("write_file", {"path": path, "content": "7" * 5000}, id="call_0")
            ],
        )
        await env.step(call)
        result = await env.step("done")
        assert result.terminated and result.reward == 0.0
    finally:
        await env.close()
