"""The GRPO objective and its variants, one function per formula (each written out in docs/trainer.md).

Every tensor here is per token, shape (batch, length), already shifted so that position t holds the
logprob of token t+1 given its prefix; `mask` is 1 on tokens the policy sampled and 0 elsewhere
(prompt, environment answers, padding, masked truncated completions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

AdvantageScale = Literal["batch", "group", "none"]
Normalisation = Literal["token", "sequence", "dr_grpo"]
KLEstimator = Literal["k1", "k3"]


class LossConfig(BaseModel):
    """The loss options; the defaults are DAPO-style GRPO with a truncated importance correction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scale: AdvantageScale = "batch"
    """Divide centred rewards by the batch's std, the group's std (original GRPO) or nothing (Dr.GRPO)."""
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.28, ge=0)
    """Asymmetric clip (DAPO "clip-higher"): the ratio may rise further than it may fall."""
    normalisation: Normalisation = "token"
    """`token`: sum over every trained token of the step / their global count (DAPO);
    `sequence`: mean per sequence, then mean over sequences (original GRPO);
    `dr_grpo`: sum / (sequences x `max_tokens`), a constant that does not depend on lengths."""
    max_tokens: int = Field(1024, ge=1)
    """The constant of the `dr_grpo` normalisation (the generation budget)."""
    is_cap: float | None = Field(2.0, gt=0)
    """Cap of the truncated importance weight min(pi_old / pi_behaviour, cap); None turns it off."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the KL penalty to the reference (initial) model; 0 keeps no reference model."""
    kl_estimator: KLEstimator = "k3"
    gspo: bool = False
    """Sequence-level ratio (GSPO): the geometric mean of the token ratios of a sequence, for every token.
    Use with small clips (eps ~ 3e-4 / 4e-4) as the GSPO paper does."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal (no learning signal) before the step."""
    overlong_max: int | None = Field(None, ge=1)
    overlong_cache: int = Field(0, ge=0)
    """DAPO soft overlong penalty: 0 up to max - cache completion tokens, then linear down to -1 at max."""
    mask_truncated: bool = False
    """Leave completions cut off by the token limit out of the loss (DAPO overlong filtering)."""


def group_advantages(
    rewards: torch.Tensor, groups: torch.Tensor, scale: AdvantageScale, eps: float = 1e-6
) -> torch.Tensor:
    """A_i = (r_i - mean of i's group) / s, s = batch std, group std or 1: credit relative to siblings."""
    centred = torch.empty_like(rewards)
    group_std = torch.empty_like(rewards)
    for g in torch.unique(groups):
        members = groups == g
        values = rewards[members]
        centred[members] = values - values.mean()
        group_std[members] = values.std(unbiased=False)
    if scale == "batch":
        return centred / (rewards.std(unbiased=False) + eps)
    if scale == "group":
        return centred / (group_std + eps)
    return centred


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, cache: int) -> torch.Tensor:
    """DAPO's soft overlong punishment: 0, then (max - cache - L) / cache, then -1 past `max_tokens`."""
    lengths = lengths.to(torch.float32)
    if cache == 0:
        return torch.where(lengths > max_tokens, -1.0, 0.0)
    ramp = (max_tokens - cache - lengths) / cache
    return torch.where(lengths <= max_tokens - cache, 0.0, torch.where(lengths <= max_tokens, ramp, -1.0))


def informative_groups(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """DAPO dynamic sampling: True for samples whose group's rewards are not all equal."""
    keep = torch.zeros_like(rewards, dtype=torch.bool)
    for g in torch.unique(groups):
        members = groups == g
        keep[members] = bool(rewards[members].max() > rewards[members].min())
    return keep


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator) -> torch.Tensor:
    """Per-token KL(pi || ref) estimates: k1 = log(pi/ref); k3 = ref/pi - log(ref/pi) - 1 (>= 0)."""
    if estimator == "k1":
        return logprobs - ref_logprobs
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1


def step_denominator(lengths: Sequence[int], config: LossConfig) -> float:
    """What the loss of a whole optimiser step is divided by, from the trained-token count of EVERY
    sequence in the step (all micro-batches, all ranks).

    Each micro-batch divides by this same number, so summing their gradients gives the gradient of the
    whole batch whatever the micro-batch size or the number of ranks.
    """
    return denominator(sum(lengths), sum(1 for n in lengths if n > 0), config)


def denominator(tokens: int, sequences: int, config: LossConfig) -> float:
    """`step_denominator` from the totals alone: what data-parallel ranks all-reduce."""
    if config.normalisation == "token":
        return float(max(tokens, 1))
    if config.normalisation == "dr_grpo":
        return float(max(sequences, 1) * config.max_tokens)
    return float(max(sequences, 1))


def token_weights(lengths: torch.Tensor, config: LossConfig) -> torch.Tensor | None:
    """Per-token weights given each token's sequence length: 1/|o_i| for `sequence` normalisation."""
    if config.normalisation == "sequence":
        return 1.0 / lengths.clamp(min=1).to(torch.float32)
    return None


@dataclass
class LossStats:
    """Sums over the tokens of one micro-batch, so steps can report exact means across micro-batches."""

    tokens: float = 0.0
    clipped: float = 0.0
    kl: float = 0.0
    is_weight: float = 0.0
    is_capped: float = 0.0
    ratio: float = 0.0
    is_weights: list[float] = field(default_factory=list)

    def add(self, other: LossStats) -> None:
        self.tokens += other.tokens
        self.clipped += other.clipped
        self.kl += other.kl
        self.is_weight += other.is_weight
        self.is_capped += other.is_capped
        self.ratio += other.ratio
        self.is_weights.extend(other.is_weights)

    def means(self) -> dict[str, float]:
        n = max(self.tokens, 1.0)
        weights = self.is_weights or [1.0]
        return {
            "clip_fraction": self.clipped / n,
            "kl": self.kl / n,
            "ratio_mean": self.ratio / n,
            "is_weight_mean": self.is_weight / n,
            "is_weight_min": min(weights),
            "is_weight_max": max(weights),
            "is_capped_fraction": self.is_capped / n,
        }


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    sequence_ids: torch.Tensor,
    config: LossConfig,
    *,
    denominator: float,
    behaviour_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The clipped surrogate of one micro-batch's trained tokens, divided by the step's `denominator`.

    Every tensor is 1-D over the sampled tokens of the micro-batch (padding and prompt tokens already
    removed), so padded and packed batches share this code. `advantages` is the advantage of each
    token's sequence; `sequence_ids` says which sequence each token belongs to (for GSPO and the
    `sequence` normalisation). `old_logprobs` are the trainer's before this step's update (pi_old);
    `behaviour_logprobs` those the rollout engine reported when sampling (stale weights, other
    numerics): each token's loss is reweighted by min(pi_old / pi_behaviour, is_cap).
    """
    old_logprobs = old_logprobs.detach()
    log_ratio = logprobs - old_logprobs
    _, seq = torch.unique(sequence_ids, return_inverse=True)
    count = int(seq.max()) + 1 if seq.numel() else 0
    lengths = torch.zeros(count, dtype=logprobs.dtype, device=logprobs.device).index_add_(
        0, seq, torch.ones_like(logprobs)
    )[seq]
    if config.gspo:
        # s_i = exp(mean_t log_ratio); per token sg[s_i] * pi / sg[pi] keeps the sequence's value and
        # gives each token the gradient of its own logprob, scaled by s_i.
        sums = torch.zeros(count, dtype=logprobs.dtype, device=logprobs.device).index_add_(
            0, seq, log_ratio.detach()
        )
        ratio = torch.exp(sums[seq] / lengths + logprobs - logprobs.detach())
    else:
        ratio = torch.exp(log_ratio)
    advantages = advantages.to(logprobs.dtype)
    clipped_ratio = ratio.clamp(1 - config.eps_low, 1 + config.eps_high)
    per_token = -torch.minimum(ratio * advantages, clipped_ratio * advantages)
    is_weight = torch.ones_like(logprobs)
    raw_weight: torch.Tensor | None = None
    if behaviour_logprobs is not None and config.is_cap is not None:
        raw_weight = torch.exp(old_logprobs - behaviour_logprobs).detach()
        is_weight = raw_weight.clamp(max=config.is_cap)
        per_token = per_token * is_weight
    kl = torch.zeros_like(logprobs)
    if ref_logprobs is not None and config.kl_coef > 0:
        kl = kl_penalty(logprobs, ref_logprobs.detach(), config.kl_estimator)
        per_token = per_token + config.kl_coef * kl
    weights = token_weights(lengths, config)
    if weights is not None:
        per_token = per_token * weights
    loss = per_token.sum() / denominator
    with torch.no_grad():
        capped = 0.0
        if raw_weight is not None and config.is_cap is not None:
            capped = float((raw_weight > config.is_cap).sum())
        stats = LossStats(
            tokens=float(logprobs.numel()),
            clipped=float((ratio != clipped_ratio).sum()),
            kl=float(kl.sum()),
            is_weight=float(is_weight.sum()),
            is_capped=capped,
            ratio=float(ratio.sum()),
            is_weights=[] if raw_weight is None else _extremes(raw_weight),
        )
    return loss, stats


def _extremes(values: torch.Tensor) -> list[float]:
    """The min and max only: enough for the step's IS-ratio range without keeping every token."""
    if values.numel() == 0:
        return []
    return [float(values.min()), float(values.max())]


def shaped_rewards(
    rewards: Sequence[float], completion_lengths: Sequence[int], config: LossConfig
) -> list[float]:
    """Rewards plus the overlong penalty when it is on; what the advantages are computed from."""
    if config.overlong_max is None:
        return list(rewards)
    penalty = overlong_penalty(torch.tensor(completion_lengths), config.overlong_max, config.overlong_cache)
    return [r + float(p) for r, p in zip(rewards, penalty, strict=True)]


__all__ = [
    "LossConfig",
    "LossStats",
    "denominator",
    "group_advantages",
    "grpo_loss",
    "informative_groups",
    "kl_penalty",
    "overlong_penalty",
    "shaped_rewards",
    "step_denominator",
    "token_weights",
]
