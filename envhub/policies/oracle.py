"""Plays the environment's own reference solution: the upper bound every reward should reach."""

from __future__ import annotations

import asyncio

from envhub.core import Action, Env
from envhub.messages import Message
from envhub.policies.base import Policy
from envhub.tools import ToolSpec


class OraclePolicyError(RuntimeError):
    """The environment has no reference solution to play."""


class OraclePolicy(Policy):
    name = "oracle"
    engine = "reference solution"
    """The env's own `reference_action`: no model, no sampling."""

    def __init__(self, env: Env | None = None) -> None:
        self.env = env

    def for_episode(self, env: Env) -> Policy:
        return OraclePolicy(env)

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        if self.env is None:
            raise OraclePolicyError("the oracle policy must be bound to an env with for_episode(env)")
        action = await asyncio.to_thread(self.env.reference_action, messages)
        if action is None:
            name = self.env.spec.id if self.env.spec else type(self.env).__name__
            raise OraclePolicyError(
                f"{name} has no reference solution (reference_action returned None); "
                "use another policy, e.g. --policy random"
            )
        return action
