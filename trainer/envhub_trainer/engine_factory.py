"""The engine a run's config asks for: Hugging Face or vLLM in this process, or engine actors on Ray.

Kept apart from the engines themselves so that each engine module imports only what it builds on, and
nothing imports this but the training loop (no import cycle between the engines and Ray's plumbing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envhub_trainer.config import TrainConfig
from envhub_trainer.engine import RolloutEngine, TransformersEngine


def local_engine(config: TrainConfig, model_dir: Path) -> RolloutEngine:
    """The configured engine in this process (`engine`: hf, vllm, vllm-server) on its own copy of
    `model_dir`: the trainer's, or one Ray engine actor's."""
    common: dict[str, Any] = {
        "max_new_tokens": config.max_new_tokens,
        "temperature": config.temperature,
        "seed": config.seed,
        "chat_template": config.chat_template,
    }
    if config.engine == "vllm":
        from envhub_trainer.vllm_engine import VLLMEngine  # imports vLLM: only when asked for

        return VLLMEngine(
            model_dir,
            **common,
            sync_timeout=config.sync_timeout,
            batch_size=config.generation_batch_size,
            dtype=config.dtype,
        )
    if config.engine == "vllm-server":
        from envhub_trainer.vllm_server import VLLMServerEngine

        return VLLMServerEngine(
            model_dir,
            **common,
            sync_timeout=config.sync_timeout,
            url=config.engine_url,
            concurrency=config.limits.concurrency,
            dtype=config.dtype,
        )
    return TransformersEngine(model_dir, **common, batch_size=config.generation_batch_size)


def make_engine(config: TrainConfig, model_dir: Path) -> RolloutEngine:
    """The configured rollout engine on its own copy of `model_dir`; with `ray: true`, engine actors
    each holding a `local_engine`."""
    if config.ray:
        from envhub_trainer.ray_rollout import RayEngine  # imports Ray: only when asked for

        return RayEngine(config, model_dir, local_engine)
    return local_engine(config, model_dir)
