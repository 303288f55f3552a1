"""The policy interface: messages and tool specs in, an assistant action out (with tokens, if known)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from envhub.core import Action, Env
from envhub.messages import Message
from envhub.tools import ToolSpec
from envhub.trace import EpisodeTokens, TokenTrace, token_drift

ToolFormat = Literal["native", "text"]
"""How a model-backed policy gives the model its tools: through the server or chat template ("native"),
or as schemas in the system prompt with `<tool_call>` blocks read back from the reply ("text"), for
servers and chat templates that cannot take tools (`envhub.text_format.tool_prompt`)."""

__all__ = ["EpisodeTokens", "Generation", "Policy", "TokenTrace", "ToolFormat", "token_drift"]
"""The token trace lives with the records (`envhub.trace`); it is re-exported here, where policies and
the trainer have always imported it."""


class Generation(BaseModel):
    """What a model-backed policy returns: the message, and the tokens behind it when it has them."""

    model_config = ConfigDict(frozen=True)

    message: Message
    tokens: TokenTrace | None = None
    model: str | None = None


class Policy(ABC):
    """Anything that plays an environment: a model server, a local model, a script or a person."""

    name: str = "policy"
    engine: str | None = None
    """What produces the actions (`transformers`, `openai-compatible HTTP`, `reference solution`...);
    None: the class says it (`info()` records the class)."""

    @abstractmethod
    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action | Generation:
        """The next action given the whole conversation so far."""

    def info(self) -> dict[str, Any]:
        """What to record about the policy with every episode (model, server, sampling settings).

        Subclasses add their settings to this; a policy that adds nothing still records its class."""
        cls = type(self)
        return {"name": self.name, "engine": self.engine or f"{cls.__module__}.{cls.__qualname__}"}

    def for_episode(self, env: Env) -> Policy:
        """The policy to use for one episode of `env`; policies that need the env itself bind it here.

        Policies that keep per-episode state (a script position, the previous turn's tokens) return a
        fresh copy here, so concurrent episodes never share it.
        """
        return self

    async def close(self) -> None:  # noqa: B027  (an optional hook, not abstract)
        """Release connections or models the policy holds."""
