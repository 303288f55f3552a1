"""Tool-use environments whose tools are the class's own typed methods marked `@envhub.tool`.

The episode ends when the agent replies without calling a tool: that reply is its answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from envhub.authoring.chat import ChatEnv, Reaction
from envhub.core import InfrastructureError
from envhub.messages import Message, ToolCall, tool_result
from envhub.record.scope import tool_call as tool_call_scope
from envhub.tools import Tool, ToolArgumentError, ToolSpec, tool_name


class ToolEnv(ChatEnv):
    """Tool calls in one message run concurrently; every call gets exactly one tool message back."""

    def __init__(self, *, max_turns: int | None = None) -> None:
        super().__init__(max_turns=max_turns)
        self._tools: dict[str, Tool] = {}
        for cls in reversed(type(self).__mro__):
            for attr_name, attr in vars(cls).items():
                name = tool_name(attr) if callable(attr) else None
                if name is not None:
                    self._tools[name] = Tool(getattr(self, attr_name), name=name)

    @property
    def tools(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    async def react(self, message: Message) -> Reaction:
        if not message.tool_calls:
            return Reaction(observation=[], done=True)
        results = await asyncio.gather(*(self._call_as(i, call) for i, call in enumerate(message.tool_calls)))
        errors = [error for _, error in results if error is not None]
        info: dict[str, Any] = {"tool_calls": len(message.tool_calls)}
        if errors:
            info["error"] = {"kind": "tool_error", "message": "; ".join(errors)}
        return Reaction(observation=[reply for reply, _ in results], info=info)

    async def _call_as(self, index: int, call: ToolCall) -> tuple[Message, str | None]:
        """Run the message's `index`-th call as that tool call, so whatever it makes of its sandbox is
        kept apart from the calls running beside it (`envhub.record.scope`)."""
        with tool_call_scope(index):
            return await self._call(call)

    async def _call(self, call: ToolCall) -> tuple[Message, str | None]:
        """Run one call; any failure becomes the tool's answer to the agent, and is also returned."""
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            error = f"unknown tool {call.name!r}; available tools: {known}"
        else:
            try:
                output = await tool(tool.parse_arguments(call.arguments))
            except ToolArgumentError as exc:
                error = str(exc)
            except InfrastructureError:
                raise  # not the agent's doing: the runner records and retries it
            except Exception as exc:  # the tool failed on the agent's input: tell the agent
                error = f"{call.name} failed: {type(exc).__name__}: {exc}"
            else:
                return tool_result(call.id, _as_text(output), name=call.name), None
        return tool_result(call.id, f"Error: {error}", name=call.name), error


def _as_text(output: object) -> str:
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output)
    except TypeError:
        return str(output)
