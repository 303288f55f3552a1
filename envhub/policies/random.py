"""A seeded random baseline: random text, or random calls to the env's tools with schema-shaped arguments."""

from __future__ import annotations

import json
import random
import string
from typing import Any

from envhub.core import Action
from envhub.messages import Message, ToolCall
from envhub.policies.base import Policy
from envhub.tools import ToolSpec


def random_value(schema: dict[str, Any], rng: random.Random) -> Any:
    """A value of the JSON-schema type, small enough to be a plausible argument."""
    kind = schema.get("type")
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if kind == "integer":
        return rng.randint(-10, 1000)
    if kind == "number":
        return round(rng.uniform(-10, 1000), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [random_value(schema.get("items", {}), rng) for _ in range(rng.randint(0, 3))]
    if kind == "object":
        return {k: random_value(v, rng) for k, v in schema.get("properties", {}).items()}
    return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8)))


class RandomPolicy(Policy):
    name = "random"

    engine = "random"

    def __init__(self, seed: int | None = None, tool_probability: float = 0.5) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.tool_probability = tool_probability

    def info(self) -> dict[str, Any]:
        """The seed (None: unseeded, so not reproducible) and how often it calls a tool."""
        return {**super().info(), "seed": self.seed, "tool_probability": self.tool_probability}

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        if tools and self.rng.random() < self.tool_probability:
            spec = self.rng.choice(tools)
            arguments = random_value(spec.parameters, self.rng)
            call = ToolCall(id=f"call_{len(messages)}", name=spec.name, arguments=json.dumps(arguments))
            return Message(role="assistant", tool_calls=[call])
        return str(self.rng.randint(0, 1000))
