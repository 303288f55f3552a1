"""Multi-step arithmetic the agent must work through with calculator tools."""

from __future__ import annotations

import operator
import random
from collections.abc import Callable

import envhub
from envhub.grading.hedges import HEDGE_NOTE, extra_candidates
from envhub.messages import Message, ToolCall
from envhub_games.answers import last_integer

OPERATIONS: dict[str, tuple[str, Callable[[int, int], int]]] = {
    "add": ("add {n} to it", operator.add),
    "subtract": ("subtract {n} from it", operator.sub),
    "multiply": ("multiply it by {n}", operator.mul),
}


class Arithmetic(envhub.ToolEnv):
    """Chain `steps` operations on a start number; exact integer answer, one calculator call per step."""

    system_prompt = (
        "You are a careful assistant. Use the calculator tools for every operation, "
        "then reply with the final number only."
    )

    def __init__(self, steps: int = 3, *, max_turns: int | None = None) -> None:
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        super().__init__(max_turns=max_turns if max_turns is not None else steps + 3)
        self.steps = steps
        self.start = 0
        self.plan: list[tuple[str, int]] = []
        self.reward_notes: dict[str, str] = {}

    def setup(self, rng: random.Random) -> str:
        self.start = rng.randint(100, 999)
        self.plan = [(rng.choice(list(OPERATIONS)), rng.randint(2, 99)) for _ in range(self.steps)]
        self.reward_notes = {}
        phrases = ", then ".join(OPERATIONS[op][0].format(n=n) for op, n in self.plan)
        return f"Start with {self.start}; {phrases}. What is the result?"

    @property
    def result(self) -> int:
        value = self.start
        for op, n in self.plan:
            value = OPERATIONS[op][1](value, n)
        return value

    @envhub.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first addend.
            b: The second addend.
        """
        return a + b

    @envhub.tool
    def subtract(self, a: int, b: int) -> int:
        """Subtract b from a.

        Args:
            a: The number to subtract from.
            b: The number to subtract.
        """
        return a - b

    @envhub.tool
    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: The first factor.
            b: The second factor.
        """
        return a * b

    @envhub.reward
    def exact(self, answer: str, messages: list[Message]) -> float:
        """1 when the reply's last integer is the result; a reply whose last line names other numbers
        beside it that neither the question nor a tool gave ("865 or 866") scores 0 with a note."""
        if last_integer(answer) != self.result:
            return 0.0
        given = [m.text for m in messages if m.text != answer]
        if extra_candidates(answer, given):
            self.reward_notes["exact"] = HEDGE_NOTE
            return 0.0
        return 1.0

    @envhub.reward(weight=0.0)
    def tool_calls(self, messages: list[Message]) -> float:
        """Recorded for analysis, not rewarded: how many calculator calls the agent made."""
        return float(sum(len(m.tool_calls) for m in messages))

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        done = [m for m in messages if m.role == "tool"]
        value = int(done[-1].text) if done else self.start
        if len(done) == len(self.plan):
            return str(value)
        op, n = self.plan[len(done)]
        return Message(
            role="assistant", tool_calls=[ToolCall.create(op, {"a": value, "b": n}, id=f"call_{len(done)}")]
        )
