"""A random baseline that acts on what the page offers: clicks, types and selects among listed elements.

envhub's generic `RandomPolicy` calls tools with arbitrary numbers, which almost never name a real element;
this one draws from the ids in the latest text view, so its score is a fair floor for the tasks.
"""

from __future__ import annotations

import random
import re
from typing import Any

from envhub.core import Action
from envhub.messages import Message, ToolCall
from envhub.policies.base import Policy
from envhub.tools import ToolSpec

ELEMENT = re.compile(r'^\[(\d+)\] (\S+) "[^"]*"(?:.* options: (.*))?', re.MULTILINE)
TYPEABLE = {"textbox", "password", "date"}
KEYS = ["Enter", "Tab", "Escape", "ArrowDown", "ArrowUp", "ArrowLeft", "ArrowRight"]


class RandomWebPolicy(Policy):
    """Uniform over the page's elements and a few page-wide actions; calls done() with probability `stop`."""

    name = "random-web"

    def __init__(
        self, seed: int | None = None, *, stop: float = 0.1, width: int = 640, height: int = 480
    ) -> None:
        self.rng, self.seed = random.Random(seed), seed
        self.stop, self.width, self.height = stop, width, height

    def info(self) -> dict[str, Any]:
        return {**super().info(), "seed": self.seed, "stop": self.stop}

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        rng = self.rng
        view = next((m.text for m in reversed(messages) if m.role == "user"), "")
        elements = [(int(i), role, options) for i, role, options in ELEMENT.findall(view)]
        if rng.random() < self.stop:
            return self._call("done", {"answer": str(rng.randint(0, 100))}, messages)
        choice = rng.random()
        if elements and choice < 0.7:
            eid, role, options = rng.choice(elements)
            if role in TYPEABLE:
                return self._call(
                    "type", {"element": eid, "text": rng.choice(["a", "test", "42", "2024-01-01"])}, messages
                )
            if role == "combobox" and options:
                return self._call(
                    "select", {"element": eid, "option": rng.choice(options.split(" | "))}, messages
                )
            return self._call("click", {"element": eid}, messages)
        if choice < 0.8:
            x, y = rng.randrange(self.width), rng.randrange(self.height)
            return self._call("click_at", {"x": x, "y": y}, messages)
        if choice < 0.9:
            return self._call("press", {"key": rng.choice(KEYS)}, messages)
        return self._call("scroll", {"direction": rng.choice(["up", "down"]), "amount": 400}, messages)

    @staticmethod
    def _call(name: str, arguments: dict[str, Any], messages: list[Message]) -> Message:
        return Message(
            role="assistant", tool_calls=[ToolCall.create(name, arguments, id=f"call_{len(messages)}")]
        )
