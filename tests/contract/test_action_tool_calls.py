"""One rule for an action string (16.6): its `<tool_call>` blocks are tool calls, wherever it is given.

The same string goes through async `step()`, the gymnasium adapter and `envhub play`; each must call
the tool, not take the string as the final answer.
"""

from __future__ import annotations

from typer.testing import CliRunner

import envhub
from envhub.cli import app
from envhub.integrations.gymnasium import to_gymnasium
from envhub.messages import Message

CALL = 'Adding first. <tool_call>{"name": "add", "arguments": {"a": 40, "b": 2}}</tool_call>'


async def test_async_step_reads_tool_call_blocks_in_a_string() -> None:
    async with envhub.make("arithmetic") as env:
        await env.reset(seed=4)
        result = await env.step(CALL)
    assert not result.terminated
    assert [(m.role, m.name, m.text) for m in result.observation] == [("tool", "add", "42")]


async def test_step_and_the_gymnasium_adapter_read_the_string_alike() -> None:
    async with envhub.make("arithmetic") as env:
        await env.reset(seed=4)
        await env.step(CALL)
        stepped: list[Message] = env.messages  # type: ignore[attr-defined]
    adapter = to_gymnasium(envhub.make("arithmetic"))
    adapter.reset(seed=4)
    adapter.step(CALL)
    adapter.close()
    assert adapter.transcript == stepped
    assert stepped[-2] == Message(
        role="assistant",
        content="Adding first.",
        tool_calls=[envhub.ToolCall(id="call_0", name="add", arguments='{"a": 40, "b": 2}')],
    )


async def test_a_message_action_is_taken_as_it_is() -> None:
    async with envhub.make("arithmetic") as env:
        await env.reset(seed=4)
        result = await env.step(Message(role="assistant", content=CALL))  # structured: no parsing
    assert result.terminated and result.observation == []


def test_play_reads_a_typed_tool_call_block_as_a_tool_call() -> None:
    result = CliRunner().invoke(
        app, ["play", "arithmetic", "--seed", "4", "--kwarg", "steps=1"], input=f"{CALL}\n7\n"
    )
    assert result.exit_code == 0, result.output
    assert "42" in result.output  # the tool answered
    assert "after 2 turns" in result.output  # the block did not end the episode as an answer
