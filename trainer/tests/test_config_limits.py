"""The trainer's config embeds envhub's `RolloutLimits` (`TrainConfig.limits`) instead of copying its
fields; the flat keys of earlier configs are still read into it, so old YAML files keep working."""

from __future__ import annotations

from pathlib import Path

import pytest
from envhub_trainer.config import TrainConfig, load_config
from pydantic import ValidationError

from envhub.rollout import RolloutLimits

BASE = {"model": "m", "env_id": "x"}


def test_the_limits_are_envhubs_own_object_with_the_trainers_retries() -> None:
    config = TrainConfig.model_validate(BASE)
    assert config.limits == RolloutLimits(retries=2)
    nested = TrainConfig.model_validate(
        {**BASE, "limits": {"concurrency": 3, "backend_concurrency": {"docker": 1}}}
    )
    assert nested.limits == RolloutLimits(concurrency=3, backend_concurrency={"docker": 1}, retries=2)
    given = RolloutLimits(concurrency=5)
    assert TrainConfig(model=Path("m"), env_id="x", limits=given).limits is given


def test_an_earlier_configs_flat_keys_are_read_into_the_limits(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "model: m\nenv_id: x\nconcurrency: 4\nstep_timeout: 10\nepisode_timeout: 60\n"
        "episode_retries: 0\nbackend_concurrency: {docker: 2}\n"
    )
    assert load_config(path).limits == RolloutLimits(
        concurrency=4, step_timeout=10, episode_timeout=60, retries=0, backend_concurrency={"docker": 2}
    )
    assert TrainConfig.model_validate({**BASE, "concurrency": 6}).limits.concurrency == 6


def test_limits_given_both_ways_are_refused_with_the_fix() -> None:
    with pytest.raises(ValidationError, match=r"in `limits:` only.*concurrency.*move them under `limits:`"):
        TrainConfig.model_validate({**BASE, "concurrency": 2, "limits": {"concurrency": 3}})


def test_a_typo_inside_the_limits_is_an_error() -> None:
    with pytest.raises(ValidationError, match="concurency"):
        TrainConfig.model_validate({**BASE, "limits": {"concurency": 3}})


def test_a_time_budget_is_refused_since_a_step_needs_whole_groups() -> None:
    with pytest.raises(ValidationError, match=r"time_budget leaves episodes unplayed.*episode_timeout"):
        TrainConfig.model_validate({**BASE, "limits": {"time_budget": 60}})
