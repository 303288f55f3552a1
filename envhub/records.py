"""Episode and turn records: what is kept of every episode, for storage, display and training.

Records are plain pydantic models, so they serialise to JSON today and to the Parquet schema of the
rollout store without a second definition.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envhub.core import Provenance
from envhub.messages import Message
from envhub.policies.base import TokenTrace

ErrorKind = Literal["env_error", "policy_error", "timeout", "cancelled"]


class Turn(BaseModel):
    """One agent action and the environment's answer to it."""

    model_config = ConfigDict(frozen=True)

    index: int
    action: Message
    observation: list[Message]
    reward: float
    info: dict[str, Any] = Field(default_factory=dict)
    tokens: TokenTrace | None = None
    """The exact tokens of `action`, when the policy reported them."""


class EpisodeError(BaseModel):
    """An infrastructure failure that ended the episode early; the agent's own mistakes are not errors."""

    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    message: str


class Episode(BaseModel):
    model_config = ConfigDict(frozen=True)

    episode_id: str
    env_id: str
    env_version: int | None = None
    provenance: Provenance = Field(default_factory=Provenance)
    seed: int | None = None
    policy: str
    prompt: list[Message]
    turns: list[Turn] = Field(default_factory=list)
    reward: float = 0.0
    """The return: the sum of every turn's reward."""
    reward_components: dict[str, float] = Field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    error: EpisodeError | None = None
    wall_seconds: float = 0.0

    @property
    def messages(self) -> list[Message]:
        """The whole conversation in order, as a model would see it."""
        out = list(self.prompt)
        for turn in self.turns:
            out.append(turn.action)
            out.extend(turn.observation)
        return out
