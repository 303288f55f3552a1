"""A person at the terminal plays the environment: for `envhub play` and for trying a task by hand."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from envhub.core import Action
from envhub.messages import Message, ToolCall
from envhub.policies.base import Policy
from envhub.tools import ToolSpec

HELP = "Type a reply, or call a tool with: /call NAME {json arguments}"


def parse_human_line(line: str, turn: int) -> Action:
    """`/call name {...}` becomes a tool call; anything else is the reply text."""
    if not line.startswith("/call "):
        return line
    _, _, rest = line.partition(" ")
    name, _, arguments = rest.strip().partition(" ")
    return Message(
        role="assistant",
        tool_calls=[ToolCall(id=f"call_{turn}", name=name, arguments=arguments.strip() or "{}")],
    )


class HumanPolicy(Policy):
    name = "human"
    engine = "terminal"

    def __init__(self, read_line: Callable[[str], str] = input) -> None:
        self.read_line = read_line

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        if tools and len(messages) <= 2:
            described = json.dumps([t.to_openai()["function"] for t in tools], indent=1)
            print(f"{HELP}\nTools: {described}")
        line = await asyncio.to_thread(self.read_line, "you> ")
        return parse_human_line(line, len(messages))
