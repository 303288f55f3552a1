"""Rollout engines: what generates episodes for the trainer, and how the trainer's weights reach it.

The engine keeps its own copy of the weights (as vLLM would), so what it samples with is exactly what
was last synced: `version` says which optimiser step that was and `checksum` proves the copy matches.
Every engine's episodes are played by `envhub.rollout`: an engine in this process hands it a policy,
the Ray engine a picklable factory of one (`player`), for the same Ray backend `envhub rollout` uses.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any, Protocol

import torch

from envhub.policies.base import Policy
from envhub.policies.hf import TransformersPolicy
from envhub.rollout.ray_runner import PolicyFactory, RayEpisodePool


def weights_checksum(state: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = (
            state[name].detach().to("cpu").contiguous().reshape(-1)
        )  # 0-d tensors cannot be viewed as bytes
        digest.update(f"{name}|{tensor.dtype}|{tuple(state[name].shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


class RolloutEngine(Protocol):
    """Samples episodes with a policy; receives the trainer's weights after each optimiser step."""

    version: int

    @property
    def backend(self) -> str | RayEpisodePool:
        """The `envhub.rollout` backend its episodes are played on: "local", or the run's Ray actors."""
        ...

    def player(self, *, greedy: bool = False) -> Policy | PolicyFactory:
        """What `envhub.rollout.rollout` plays with: the engine's policy, or (Ray) a factory of one."""
        ...

    def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Load the trainer's weights; episodes generated afterwards are stamped with `version`."""
        ...

    def checksum(self) -> str: ...

    def metrics(self) -> dict[str, float]:
        """Engine counters for the step's metrics row (e.g. vLLM's prefix-cache hit rate); may be empty."""
        ...

    def close(self) -> None:
        """Stop what the engine started (a server process, Ray actors); called once the run ends."""
        ...

    @property
    def tokenizer(self) -> Any: ...

    def rng_state(self) -> Any:
        """The sampling seed stream, for checkpoints."""
        ...

    def set_rng_state(self, state: Any) -> None: ...


class InProcessEngine:
    """An engine in the trainer's process: its policy plays the episodes on envhub's asyncio runner."""

    backend = "local"

    def policy(self, *, greedy: bool = False) -> Policy:
        """The envhub policy that generates with the engine's current weights."""
        raise NotImplementedError

    def player(self, *, greedy: bool = False) -> Policy | PolicyFactory:
        return self.policy(greedy=greedy)


GENERATION_QUIET_S = 0.02
"""How long no episode may ask before an engine starts a generation call (MicroBatcher's `max_wait`).
A step's episodes reach the engine over tens of milliseconds of env set-up and prompt rendering; a CPU
call takes seconds, so waiting out that spread costs ~1% while a split batch costs a whole second call."""


class TransformersEngine(InProcessEngine):
    """Hugging Face `generate` on the engine's own copy of the model: the CPU fallback, and CI's engine.

    It reuses envhub's `TransformersPolicy` (chat template once per turn, exact ids and logprobs);
    turns of up to `batch_size` concurrent episodes are generated in one left-padded call.
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        chat_template: str | None = None,
        batch_size: int = 1,
    ) -> None:
        self._policy = TransformersPolicy(
            model_dir,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            chat_template=chat_template,
            batch_size=batch_size,
            max_wait=GENERATION_QUIET_S,
        )
        self._policy.load()  # the policy loads lazily; sync() needs a model to fill
        self.version = 0

    @property
    def model(self) -> Any:
        return self._policy.model

    @property
    def tokenizer(self) -> Any:
        return self._policy.tokenizer

    def policy(self, *, greedy: bool = False) -> Policy:
        if not greedy:
            return self._policy
        greedy_policy = copy.copy(self._policy)  # shares the loaded model, samples nothing
        greedy_policy.temperature = 0.0
        return greedy_policy

    def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        self._policy.load_state_dict(state)  # between generations, never during one
        self.version = version

    def rng_state(self) -> Any:
        """The sampling seed stream, saved in checkpoints so a resumed run samples as an unbroken one."""
        return self._policy.rng_state()

    def set_rng_state(self, state: Any) -> None:
        self._policy.set_rng_state(state)

    def checksum(self) -> str:
        return weights_checksum(self._policy.state_dict())

    def metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        """Nothing to stop: the model copy is freed with the engine."""
