"""Episode and turn records: what is kept of every episode, for storage, display and training.

The contract's records of an episode (its turns, its ending, its token samples). The tape an episode
may carry (`Episode.recording`) has its own types in `envhub.record.calls`, beside the tape.

Records are plain pydantic models, so they serialise to JSON today and to the Parquet schema of the
rollout store without a second definition.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envhub.core import Provenance
from envhub.messages import Message
from envhub.record.calls import Recording
from envhub.tools import ToolSpec
from envhub.trace import TokenTrace

ErrorKind = Literal["env_error", "policy_error", "timeout", "cutoff"]
"""`timeout`: one policy call or env step took longer than the step timeout (retried as infrastructure);
`cutoff`: the episode or batch time budget ran out (recorded as truncated, not retried)."""

RETRYABLE: frozenset[ErrorKind] = frozenset({"env_error", "policy_error", "timeout"})


def episode_id(index: int) -> str:
    """Episode ids are the zero-padded index in the batch, so they sort and resume deterministically."""
    return f"{index:06d}"


def episode_order(episode_id: str) -> tuple[int, str]:
    """The sort key of episode ids: by length first, so "1000000" comes after "999999"."""
    return len(episode_id), episode_id


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
    policy_info: dict[str, Any] = Field(default_factory=dict)
    """`Policy.info()`: the store reads `model`, `temperature`, `top_p` and `max_tokens` from it."""
    tools: list[ToolSpec] = Field(default_factory=list)
    """The tools the environment offered the agent, as the model was shown them."""
    prompt: list[Message]
    turns: list[Turn] = Field(default_factory=list)
    reward: float = 0.0
    """The return: the sum of every turn's reward."""
    reward_components: dict[str, float] = Field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    error: EpisodeError | None = None
    attempts: int = 1
    """How many times the episode was run: more than one after infrastructure errors were retried."""
    started_at: datetime | None = None
    wall_seconds: float = 0.0
    isolation: dict[str, Any] | None = None
    """The sandbox's isolation report: which parts of the policy were enforced, and how."""
    recording: Recording | None = None
    """Every sandbox, REPL, tool and secret-entropy call with its answer, when rolled out with `record`;
    `envhub replay` plays the episode again against it without sandboxes. None when not recorded."""
    parent: str | None = None
    """The id of the episode this one was forked from (`envhub rollout --fork-at`); None otherwise."""
    fork_turn: int | None = None
    """How many turns this episode shares with its parent: it was forked after that many steps."""
    node: str | None = None
    """The Ray node that ran the episode (its node id); None when it ran in this process."""
    sandbox_provider: str | None = None
    """The sandbox backend that ran the episode's sandbox ("local", "docker", "e2b"), after any failover;
    None when it opened no sandbox."""

    @property
    def ending(self) -> Literal["error", "terminated", "truncated", "unfinished"]:
        """How the episode ended, in one word; an infrastructure error outranks the env's own ending."""
        if self.error is not None:
            return "error"
        if self.terminated:
            return "terminated"
        return "truncated" if self.truncated else "unfinished"

    @property
    def messages(self) -> list[Message]:
        """The whole conversation in order, as a model would see it."""
        out = list(self.prompt)
        for turn in self.turns:
            out.append(turn.action)
            out.extend(turn.observation)
        return out


class TokenSample(BaseModel):
    """One trainable token sequence: consecutive turns whose prompts extend each other exactly."""

    model_config = ConfigDict(frozen=True)

    token_ids: list[int]
    loss_mask: list[int]
    """1 on tokens the policy sampled, 0 on prompt and environment tokens."""
    logprobs: list[float]
    """The behaviour policy's logprob of each sampled token; 0.0 where the mask is 0."""
    turn_indices: list[int] = Field(default_factory=list)
    """The turns this sequence covers, so facts recorded per turn can be joined to it."""


def token_samples(turns: list[Turn]) -> list[TokenSample]:
    """Join the turns' token traces into as few sequences as token drift allows.

    A turn continues the current sequence only if its prompt starts with every token of that sequence
    and the policy reported no `sample_break`; otherwise a new sequence begins at that turn. Turns
    without prompt token ids cannot be placed and end the episode's samples.
    """
    samples: list[TokenSample] = []
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    covered: list[int] = []
    for turn in turns:
        trace = turn.tokens
        if trace is None or trace.prompt_token_ids is None:
            break
        prompt = trace.prompt_token_ids
        extends = bool(ids) and trace.sample_break is None and prompt[: len(ids)] == ids
        if ids and not extends:
            samples.append(
                TokenSample(token_ids=ids, loss_mask=mask, logprobs=logprobs, turn_indices=covered)
            )
            ids, mask, logprobs, covered = [], [], [], []
        new_context = prompt[len(ids) :]
        completion = trace.completion_token_ids
        sampled = trace.completion_logprobs or [0.0] * len(completion)
        ids = [*ids, *new_context, *completion]
        mask = [*mask, *([0] * len(new_context)), *([1] * len(completion))]
        logprobs = [*logprobs, *([0.0] * len(new_context)), *sampled]
        covered = [*covered, turn.index]
    if ids:
        samples.append(TokenSample(token_ids=ids, loss_mask=mask, logprobs=logprobs, turn_indices=covered))
    return samples
