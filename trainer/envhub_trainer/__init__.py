"""envhub-trainer: GRPO over envhub environments, token-in/token-out, with a synced rollout engine.

The package's names load on first use (PEP 562): `envhub --help` imports this package to list the
`train` and `report` commands, and must not pay for torch to do so.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envhub_trainer.config import TrainConfig, load_config
    from envhub_trainer.loss import LossConfig

_LAZY = {
    "TrainConfig": "envhub_trainer.config",
    "load_config": "envhub_trainer.config",
    "LossConfig": "envhub_trainer.loss",
}

__all__ = ["LossConfig", "TrainConfig", "load_config"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envhub_trainer' has no attribute {name!r}")
