"""Rollout engines: what generates episodes for the trainer, and how the trainer's weights reach it.

The engine keeps its own copy of the weights (as vLLM would), so what it samples with is exactly what
was last synced: `version` says which optimiser step that was and `checksum` proves the copy matches.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any, Protocol

import torch

from envhub.policies.base import Policy
from envhub.policies.hf import TransformersPolicy


def weights_checksum(state: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


class RolloutEngine(Protocol):
    """Samples episodes with a policy; receives the trainer's weights after each optimiser step."""

    version: int

    def policy(self, *, greedy: bool = False) -> Policy:
        """The envhub policy that generates with the engine's current weights."""
        ...

    def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Load the trainer's weights; episodes generated afterwards are stamped with `version`."""
        ...

    def checksum(self) -> str: ...


class TransformersEngine:
    """Hugging Face `generate` on the engine's own copy of the model: the CPU fallback, and CI's engine.

    It reuses envhub's `TransformersPolicy` (chat template once per turn, exact ids and logprobs).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        chat_template: str | None = None,
    ) -> None:
        self._policy = TransformersPolicy(
            model_dir,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            chat_template=chat_template,
        )
        # TransformersPolicy loads lazily in a worker thread; load now so sync() has a model to fill.
        self._shared: Any = self._policy._shared
        self._shared.load()
        self.version = 0

    @property
    def model(self) -> Any:
        return self._shared.model

    @property
    def tokenizer(self) -> Any:
        return self._shared.tokenizer

    def policy(self, *, greedy: bool = False) -> Policy:
        if not greedy:
            return self._policy
        greedy_policy = copy.copy(self._policy)  # shares the loaded model, samples nothing
        greedy_policy.temperature = 0.0
        return greedy_policy

    def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        with self._shared.lock, torch.no_grad():  # never mid-generation
            self._shared.model.load_state_dict(state)
            self.version = version

    def rng_state(self) -> Any:
        """The sampling seed stream, saved in checkpoints so a resumed run samples as an unbroken one."""
        return self._shared.rng.getstate()

    def set_rng_state(self, state: Any) -> None:
        version, internal, gauss = state
        self._shared.rng.setstate((version, tuple(internal), gauss))

    def checksum(self) -> str:
        with self._shared.lock:
            return weights_checksum(self._shared.model.state_dict())
