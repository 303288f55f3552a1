"""Gradients accumulated in place (grad_accumulation.py) are the gradients autograd accumulates: the
same loss, the same .grad for every parameter (tied embeddings, biases, the padding row included)
and the same update, over several micro-batches of a real transformers model."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
import torch
from envhub_trainer.config import TrainConfig
from envhub_trainer.grad_accumulation import fused_accumulation
from envhub_trainer.grpo import train_step
from envhub_trainer.loss import LossConfig
from envhub_trainer.samples import TrainSample

VOCAB, PAD = 97, 3


def llama(tied: bool) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=tied, pad_token_id=PAD,
    )  # fmt: skip
    return LlamaForCausalLM(config).train()


def qwen2() -> Any:
    """Biases on q, k and v: the bias path of the fused linear."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, pad_token_id=PAD,
    )  # fmt: skip
    return Qwen2ForCausalLM(config).train()


def samples(count: int = 10, seed: int = 0) -> list[TrainSample]:
    """Prompts and completions of uneven lengths; the padding token occurs inside some of them."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        prompt, completion = rng.randint(3, 9), rng.randint(1, 12)
        ids = [rng.choice([PAD, *range(5, VOCAB)]) for _ in range(prompt + completion)]
        logprobs = [0.0] * prompt + [-rng.uniform(0.1, 2.0) for _ in range(completion)]
        out.append(
            TrainSample(
                token_ids=ids, loss_mask=[0] * prompt + [1] * completion, logprobs=logprobs, reward=0.0,
                group=i // 2, episode_id=str(i), version=0, advantage=rng.choice([-1.0, 0.5, 1.0]),
            )
        )  # fmt: skip
    return out


def config(**loss: Any) -> TrainConfig:
    return TrainConfig.model_validate(
        {"model": "m", "env_id": "x", "micro_batch_size": 3, "max_grad_norm": 1.0, "loss": LossConfig(**loss)}
    )


def step(model: Any, fuse: bool, cfg: TrainConfig) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """One train_step on a copy of `model`; its losses and every parameter's gradient (None as zeros)."""
    model = copy.deepcopy(model)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.0)
    losses = train_step(model, optimiser, samples(), cfg, pad_id=PAD, fuse_accumulation=fuse)
    grads = {
        name: (p.grad if p.grad is not None else torch.zeros_like(p)).clone()
        for name, p in model.named_parameters()
    }
    return losses, grads


@pytest.mark.parametrize("build", [lambda: llama(True), lambda: llama(False), qwen2])
@pytest.mark.parametrize("loss", [{}, {"normalisation": "sequence"}])
def test_fused_accumulation_gives_autograds_gradients(build: Any, loss: dict[str, Any]) -> None:
    model, cfg = build(), config(**loss)
    plain_losses, plain = step(model, False, cfg)
    fused_losses, fused = step(model, True, cfg)
    assert fused_losses["loss"] == pytest.approx(plain_losses["loss"], rel=1e-6, abs=1e-9)
    assert fused_losses["grad_norm"] == pytest.approx(plain_losses["grad_norm"], rel=1e-5)
    assert plain_losses["grad_norm"] > 0
    assert plain.keys() == fused.keys()
    for name in plain:
        torch.testing.assert_close(fused[name], plain[name], rtol=1e-5, atol=1e-7, msg=name)


def test_the_padding_row_gets_no_gradient_as_in_autograd() -> None:
    """nn.Embedding(padding_idx) leaves that row's gradient 0; untied, nothing else writes to it."""
    _, grads = step(llama(False), True, config())
    assert torch.count_nonzero(grads["model.embed_tokens.weight"][PAD]) == 0
    assert torch.count_nonzero(grads["model.embed_tokens.weight"]) > 0


def test_the_same_update_over_three_steps() -> None:
    """AdamW on fused and plain gradients walks the same weights (differences are float rounding)."""
    plain, fused = llama(True), llama(True)
    for model, fuse in ((plain, False), (fused, True)):
        optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
        for seed in range(3):
            train_step(model, optimiser, samples(seed=seed), config(), pad_id=PAD, fuse_accumulation=fuse)
    for (name, a), (_, b) in zip(plain.named_parameters(), fused.named_parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)


def test_a_gradient_the_step_does_not_write_is_not_the_last_steps() -> None:
    """Kept gradients are overwritten by a step's first write; a layer the step never ran ends with
    none (as after zero_grad), so the optimiser cannot apply the last step's gradient again."""
    model = llama(True)
    model.unused = torch.nn.Linear(4, 4)  # in the model, never in its forward
    optimiser = torch.optim.SGD(model.parameters(), lr=0.0)
    model.unused.weight.grad = torch.ones(4, 4)
    assert grad_of(model.lm_head.weight) is None
    train_step(model, optimiser, samples(), config(), pad_id=PAD)
    assert grad_of(model.unused.weight) is None
    head = grad_of(model.lm_head.weight)
    assert head is not None and torch.count_nonzero(head) > 0
    reference = copy.deepcopy(model)  # the same weights (lr 0), with this step's gradients
    train_step(model, optimiser, samples(seed=1), config(), pad_id=PAD)
    assert grad_of(model.lm_head.weight) is head  # overwritten in place, not freed and allocated again
    train_step(
        reference, optimiser_of(reference), samples(seed=1), config(), pad_id=PAD, fuse_accumulation=False
    )
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        if name.startswith("unused"):
            continue
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=name)


def grad_of(parameter: torch.Tensor) -> torch.Tensor | None:
    """The gradient as it is now (a function, so that type checkers do not carry a narrowing over)."""
    return parameter.grad


def optimiser_of(model: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.0)


def test_the_model_is_itself_again_after_the_block() -> None:
    """The patch is per call: afterwards no module holds a forward of its own, and a plain backward
    accumulates through autograd as before."""
    model = llama(True)
    with fused_accumulation(model) as on:
        assert on
        assert any("forward" in vars(m) for m in model.modules())
    assert not any("forward" in vars(m) for m in model.modules())
    with fused_accumulation(model, enabled=False) as on:
        assert not on
        assert not any("forward" in vars(m) for m in model.modules())
    copy.deepcopy(model)  # no closures over modules left behind
