"""Each loss formula against the same numbers worked out by hand (docs/trainer.md has the formulas)."""

from __future__ import annotations

import math

import pytest
import torch
from envhub_trainer.loss import (
    LossConfig,
    group_advantages,
    grpo_loss,
    informative_groups,
    kl_penalty,
    overlong_penalty,
    shaped_rewards,
    step_denominator,
)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_advantages_are_centred_on_the_group_and_scaled_as_configured() -> None:
    rewards, groups = t(1, 0, 1, 1), torch.tensor([0, 0, 1, 1])
    assert group_advantages(rewards, groups, "none").tolist() == [0.5, -0.5, 0.0, 0.0]
    by_group = group_advantages(rewards, groups, "group")
    assert by_group[:2].tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    assert by_group[2:].tolist() == [0.0, 0.0]  # a group that all agree carries no signal
    batch_std = math.sqrt(sum((r - 0.75) ** 2 for r in [1, 0, 1, 1]) / 4)
    assert group_advantages(rewards, groups, "batch").tolist() == pytest.approx(
        [0.5 / batch_std, -0.5 / batch_std, 0, 0], abs=1e-5
    )


def test_clipped_surrogate_with_asymmetric_clip_by_hand() -> None:
    old = t(0.0, 0.0, 0.0, 0.0)
    logprobs = torch.log(t(1.5, 1.1, 0.5, 0.9)).requires_grad_()
    advantages = t(1.0, 1.0, -1.0, -1.0)
    config = LossConfig(is_cap=None)
    loss, stats = grpo_loss(logprobs, old, advantages, torch.tensor([0, 0, 1, 1]), config, denominator=4)
    # -min(r A, clip(r, 0.8, 1.28) A): 1.5 -> 1.28 (clipped high), 0.5 -> 0.8 (clipped low).
    expected = (-1.28 - 1.1 + 0.8 + 0.9) / 4
    assert float(loss.detach()) == pytest.approx(expected)
    assert stats.clipped == 2 and stats.tokens == 4
    loss.backward()  # type: ignore[no-untyped-call]
    assert logprobs.grad is not None
    # Clipped tokens get no gradient; the others get -A * r / denominator.
    assert logprobs.grad.tolist() == pytest.approx([0.0, -1.1 / 4, 0.0, 0.9 / 4])


def test_truncated_importance_weight_caps_the_behaviour_mismatch() -> None:
    logprobs = t(-1.0, -1.0).requires_grad_()
    behaviour = t(-1.5, -3.0)  # pi_old / pi_behaviour = e^0.5 and e^2 (capped to 2)
    loss, stats = grpo_loss(
        logprobs, logprobs.detach(), t(1.0, 1.0), torch.tensor([0, 0]), LossConfig(),
        denominator=2, behaviour_logprobs=behaviour,
    )  # fmt: skip
    assert float(loss.detach()) == pytest.approx(-(math.exp(0.5) + 2.0) / 2)
    assert stats.is_capped == 1
    assert stats.means()["is_weight_max"] == pytest.approx(math.exp(2.0))


def test_kl_estimators_by_hand() -> None:
    logprobs, ref = t(-1.0), t(-1.5)
    assert float(kl_penalty(logprobs, ref, "k1")) == pytest.approx(0.5)
    assert float(kl_penalty(logprobs, ref, "k3")) == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    config = LossConfig(kl_coef=0.1, is_cap=None)
    loss, _ = grpo_loss(
        logprobs, logprobs, t(0.0), torch.tensor([0]), config, denominator=1, ref_logprobs=ref
    )
    assert float(loss.detach()) == pytest.approx(0.1 * (math.exp(-0.5) + 0.5 - 1))


def test_gspo_uses_one_sequence_ratio_for_every_token() -> None:
    old = t(0.0, 0.0, 0.0)
    logprobs = t(0.1, -0.05, 0.3).requires_grad_()
    config = LossConfig(gspo=True, eps_low=1.0, eps_high=1.0, is_cap=None)
    loss, _ = grpo_loss(logprobs, old, t(1.0, 1.0, 2.0), torch.tensor([0, 0, 1]), config, denominator=3)
    s0, s1 = math.exp((0.1 - 0.05) / 2), math.exp(0.3)
    assert float(loss.detach()) == pytest.approx(-(s0 + s0 + 2 * s1) / 3)
    loss.backward()  # type: ignore[no-untyped-call]
    assert logprobs.grad is not None
    assert logprobs.grad.tolist() == pytest.approx([-s0 / 3, -s0 / 3, -2 * s1 / 3])


def test_normalisations_by_hand() -> None:
    lengths = [2, 1, 0]  # the empty sequence (fully masked) counts for nothing
    assert step_denominator(lengths, LossConfig()) == 3
    assert step_denominator(lengths, LossConfig(normalisation="sequence")) == 2
    assert step_denominator(lengths, LossConfig(normalisation="dr_grpo", max_tokens=10)) == 20
    # `sequence`: each sequence's tokens are averaged, then sequences are: (mean(-1,-1) + -3) / 2.
    config = LossConfig(normalisation="sequence", is_cap=None)
    lp = t(0.0, 0.0, 0.0)
    loss, _ = grpo_loss(lp, lp, t(1.0, 1.0, 3.0), torch.tensor([0, 0, 1]), config, denominator=2)
    assert float(loss.detach()) == pytest.approx((-1 - 3) / 2)


def test_dapo_overlong_penalty_and_dynamic_sampling() -> None:
    lengths = torch.tensor([10, 16, 18, 20, 25])
    assert overlong_penalty(lengths, 20, 4).tolist() == pytest.approx([0, 0, -0.5, -1.0, -1.0])
    assert overlong_penalty(lengths, 20, 0).tolist() == [0, 0, 0, 0, -1]
    config = LossConfig(overlong_max=20, overlong_cache=4)
    assert shaped_rewards([1.0, 1.0], [10, 18], config) == pytest.approx([1.0, 0.5])
    keep = informative_groups(t(1, 1, 0, 1, 0, 0), torch.tensor([0, 0, 1, 1, 2, 2]))
    assert keep.tolist() == [False, False, True, True, False, False]


def test_global_token_normalisation_does_not_depend_on_micro_batching() -> None:
    """The gradient of a step is the same whether its sequences go in one micro-batch or one at a time."""
    torch.manual_seed(0)
    weight = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    sequences = [[0, 1, 2, 3], [4], [2, 2], [1, 3, 0]]  # token inputs; unequal lengths matter here
    targets = [[1, 2, 3, 4], [0], [5, 6], [6, 0, 2]]
    advantages = [1.0, -0.5, 2.0, -1.0]
    config = LossConfig(is_cap=None)
    denominator = step_denominator([len(s) for s in sequences], config)

    def grad(chunks: list[list[int]]) -> torch.Tensor:
        weight.grad = torch.zeros_like(weight)
        for chunk in chunks:
            x = torch.tensor([tok for i in chunk for tok in sequences[i]])
            y = torch.tensor([tok for i in chunk for tok in targets[i]])
            seq = torch.tensor([i for i in chunk for _ in sequences[i]])
            adv = torch.tensor([advantages[i] for i in chunk for _ in sequences[i]], dtype=torch.float64)
            lp = torch.log_softmax(weight[x], -1).gather(-1, y[:, None])[:, 0]
            loss, _ = grpo_loss(lp, lp.detach(), adv, seq, config, denominator=denominator)
            loss.backward()  # type: ignore[no-untyped-call]
        assert weight.grad is not None
        return weight.grad.clone()

    whole = grad([[0, 1, 2, 3]])
    assert torch.allclose(grad([[0], [1], [2], [3]]), whole)
    assert torch.allclose(grad([[0, 2], [1, 3]]), whole)
    # A per-micro-batch mean (the mistake this guards against) gives a different gradient.
    weight.grad = torch.zeros_like(weight)
    for chunk in ([0], [1, 2, 3]):
        x = torch.tensor([tok for i in chunk for tok in sequences[i]])
        y = torch.tensor([tok for i in chunk for tok in targets[i]])
        adv = torch.tensor([advantages[i] for i in chunk for _ in sequences[i]], dtype=torch.float64)
        lp = torch.log_softmax(weight[x], -1).gather(-1, y[:, None])[:, 0]
        (-(adv * torch.exp(lp - lp.detach())).mean()).backward()  # type: ignore[no-untyped-call]
    assert weight.grad is not None
    assert not torch.allclose(weight.grad, whole)
