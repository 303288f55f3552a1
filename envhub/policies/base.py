"""The policy interface: messages and tool specs in, an assistant action out (with tokens, if known)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envhub.core import Action, Env
from envhub.messages import Message
from envhub.tools import ToolSpec

ToolFormat = Literal["native", "text"]
"""How a model-backed policy gives the model its tools: through the server or chat template ("native"),
or as schemas in the system prompt with `<tool_call>` blocks read back from the reply ("text"), for
servers and chat templates that cannot take tools (`envhub.text_format.tool_prompt`)."""


class TokenTrace(BaseModel):
    """The exact tokens behind one assistant turn, for training on what was really sampled.

    `prompt_token_ids` is the whole context the model saw this turn (chat template applied);
    the loss mask of a turn is 1 on `completion_token_ids` and 0 on the prompt.
    """

    model_config = ConfigDict(frozen=True)

    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] | None = None
    finish_reason: str | None = None
    sample_break: str | None = None
    """Why this turn's prompt did not extend the previous turn's tokens, when it did not (token drift):
    the trainer must start a new sample here instead of concatenating."""


def token_drift(
    previous: list[int] | None,
    prompt: list[int],
    turn: int,
    decode: Callable[[list[int]], str] | None = None,
) -> str | None:
    """Why `prompt` does not start with `previous` (last turn's prompt + completion), or None if it does.

    `turn` counts from 1; `decode`, when given, shows the diverging text, which is what a person needs
    to find the template rule responsible.
    """
    if previous is None or prompt[: len(previous)] == previous:
        return None
    position = next(
        (i for i, (old, new) in enumerate(zip(previous, prompt, strict=False)) if old != new),
        min(len(previous), len(prompt)),
    )
    reason = (
        f"the chat template re-tokenised turn {turn}: prompt diverges from the previous turn's tokens "
        f"at position {position} of {len(previous)}"
    )
    if position >= len(prompt):
        return reason + f" (the prompt has only {len(prompt)} tokens: history was dropped)"
    if decode is None:
        return reason + f" (token {previous[position]} before, {prompt[position]} now)"
    before, now = decode(previous[position : position + 8]), decode(prompt[position : position + 8])
    return reason + f" ({before!r} before, {now!r} now)"


class EpisodeTokens:
    """The ids an episode's turns produced so far, so each new turn's trace says whether its prompt
    extends them (one sample) or drifted (`sample_break`). A policy keeps one per episode."""

    def __init__(self) -> None:
        self.previous: list[int] | None = None
        self.turn = 0

    def trace(
        self,
        prompt: list[int],
        completion: list[int],
        logprobs: list[float] | None,
        *,
        stopped: bool,
        decode: Callable[[list[int]], str] | None = None,
    ) -> TokenTrace:
        """This turn's trace; the turn's prompt and completion become what the next must extend."""
        self.turn += 1
        reason = token_drift(self.previous, prompt, self.turn, decode)
        self.previous = prompt + completion
        return TokenTrace(
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            completion_logprobs=logprobs,
            finish_reason="stop" if stopped else "length",
            sample_break=reason,
        )


class Generation(BaseModel):
    """What a model-backed policy returns: the message, and the tokens behind it when it has them."""

    model_config = ConfigDict(frozen=True)

    message: Message
    tokens: TokenTrace | None = None
    model: str | None = None


class Policy(ABC):
    """Anything that plays an environment: a model server, a local model, a script or a person."""

    name: str = "policy"

    @abstractmethod
    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action | Generation:
        """The next action given the whole conversation so far."""

    def info(self) -> dict[str, Any]:
        """What to record about the policy with every episode (model, server, sampling settings)."""
        return {"name": self.name}

    def for_episode(self, env: Env) -> Policy:
        """The policy to use for one episode of `env`; policies that need the env itself bind it here.

        Policies that keep per-episode state (a script position, the previous turn's tokens) return a
        fresh copy here, so concurrent episodes never share it.
        """
        return self

    async def close(self) -> None:  # noqa: B027  (an optional hook, not abstract)
        """Release connections or models the policy holds."""
