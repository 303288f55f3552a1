"""The policy interface: messages and tool specs in, an assistant action out."""

from __future__ import annotations

from abc import ABC, abstractmethod

from envhub.core import Action, Env
from envhub.messages import Message
from envhub.tools import ToolSpec


class Policy(ABC):
    """Anything that plays an environment: a model server, a local model, a script or a person."""

    name: str = "policy"

    @abstractmethod
    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        """The next action given the whole conversation so far."""

    def for_episode(self, env: Env) -> Policy:
        """The policy to use for one episode of `env`; policies that need the env itself bind it here."""
        return self
