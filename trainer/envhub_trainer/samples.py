"""Training samples from envhub episodes, token-in/token-out: the exact ids the engine sampled, never
re-tokenised text.

A multi-turn episode becomes one sample when each turn's prompt extends the previous turn's tokens;
where the chat template re-rendered history (token drift), the episode is split there and the reason
is kept on the sample, so the run's log says which template rule cost a split.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from envhub.records import Episode, token_samples

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainSample:
    """One token sequence to train on, with the episode facts the loss needs."""

    token_ids: list[int]
    loss_mask: list[int]
    """1 on sampled tokens only."""
    logprobs: list[float]
    """The behaviour policy's logprob of each sampled token (0.0 where the mask is 0)."""
    reward: float
    group: int
    """The task the episode belongs to: advantages are relative within a group."""
    episode_id: str
    version: int
    """The weight version the engine generated this sample with."""
    truncated: bool = False
    """A completion in it stopped at the token limit rather than at an end-of-turn token."""
    split_reason: str | None = None
    """Why this sample starts a new sequence mid-episode, when it does."""
    advantage: float = 0.0

    @property
    def completion_tokens(self) -> int:
        return sum(self.loss_mask)


def episode_samples(episode: Episode, *, group: int, version: int) -> list[TrainSample]:
    """The samples of one episode; each carries the episode's reward (the return is what is credited)."""
    pieces = token_samples(episode.turns)
    by_index = {turn.index: turn for turn in episode.turns}
    runs = [[by_index[i] for i in piece.turn_indices] for piece in pieces]
    missing = len(episode.turns) - sum(len(r) for r in runs)
    if missing:
        log.warning(
            "episode %s: %d turn(s) without a token trace (the policy reported none) are not trained",
            episode.episode_id,
            missing,
        )
    out: list[TrainSample] = []
    for k, (piece, run) in enumerate(zip(pieces, runs, strict=True)):
        first = run[0].tokens
        reason = None
        if k > 0:
            reason = (first.sample_break if first else None) or "the prompt does not extend the previous turn"
            log.info("episode %s split at turn %d: %s", episode.episode_id, run[0].index, reason)
        out.append(
            TrainSample(
                token_ids=piece.token_ids,
                loss_mask=piece.loss_mask,
                logprobs=piece.logprobs,
                reward=episode.reward,
                group=group,
                episode_id=episode.episode_id,
                version=version,
                truncated=any(t.tokens is not None and t.tokens.finish_reason == "length" for t in run),
                split_reason=reason,
            )
        )
    return out


def with_advantages(samples: list[TrainSample], advantages: list[float]) -> list[TrainSample]:
    return [replace(s, advantage=a) for s, a in zip(samples, advantages, strict=True)]
