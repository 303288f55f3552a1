"""The exact tokens behind each assistant turn, and whether a turn's prompt extends the turn before.

These are records, kept with every turn; they sit on the bottom floor beside the episode records so a
record never needs the policies that produce it.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field


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
