"""The lines of a run's metrics.jsonl, as types: what the trainer writes is what the report and plots read.

Two kinds of line: a training step's figures (`StepMetrics`), and the held-out reward measured before the
first step (`EvalMetrics`, step 0). Counters that depend on the run's options (the engine's, the
curriculum's, the weight-sync check) ride along as extra keys, kept as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class EvalMetrics(BaseModel):
    """The held-out reward before training (only with `eval_every`), so the curve starts at step 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int
    eval_reward: float
    version: int

    def row(self) -> dict[str, Any]:
        """The line as written to metrics.jsonl."""
        return self.model_dump()


class StepMetrics(BaseModel):
    """One training step: rewards, the loss's figures, dropped work, and where the time went."""

    model_config = ConfigDict(extra="allow", frozen=True)

    step: int
    version: int
    reward_mean: float
    reward_std: float
    pass_rate: float
    loss: float
    grad_norm: float
    trained_tokens: float
    clip_fraction: float
    kl: float
    ratio_mean: float
    is_weight_mean: float
    is_weight_min: float
    is_weight_max: float
    is_capped_fraction: float
    staleness: int
    dropped_stale_episodes: int
    dropped_groups: int
    episode_errors: int
    episode_reruns: int
    failed_groups: int
    sample_splits: int
    truncated_samples: int
    samples: int
    rollout_seconds: float
    rollout_wait_seconds: float
    generation_seconds: float
    env_seconds: float
    train_seconds: float
    sync_seconds: float
    rollout_tokens_per_second: float
    train_tokens_per_second: float
    eval_reward: float | None = None
    """The held-out reward, on the steps `eval_every` names."""
    model_tokens: float | None = None
    """Tokens the step's forward passes ran through the model, padding aside: fewer than the samples'
    tokens when rows share a prompt (`share_prompts`). None in runs written before it."""
    padded_tokens: float | None = None
    """Tokens the step's forward passes ran, padding included (each row as wide as its micro-batch's
    widest): `model_tokens` plus the padding. None in runs written before it."""
    peak_rss_gib: float | None = None
    """The trainer process's peak resident memory during the step (rollout, training, sync), in GiB:
    flat from step to step in a healthy run (`envhub_trainer.memory`). None in runs written before it."""

    def row(self) -> dict[str, Any]:
        """The line as written to metrics.jsonl, passed to `on_step` and returned by `train`."""
        return self.model_dump(exclude_none=True)


MetricsLine = Annotated[StepMetrics | EvalMetrics, Field(union_mode="left_to_right")]
_line = TypeAdapter(MetricsLine)


def read_metrics(run_dir: Path) -> list[StepMetrics | EvalMetrics]:
    """The lines logged so far; a half-written last line (a run in progress) is skipped.

    A whole line that is not a metrics row raises ValueError naming the file, line and field: the
    writer and the readers share these types, so a mismatch is a bug to see, not a gap in a curve."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows: list[StepMetrics | EvalMetrics] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line being written right now
        try:
            rows.append(_line.validate_python(data))
        except ValidationError as exc:
            raise ValueError(
                f"{path}:{number} is not a metrics row this trainer writes "
                f"({exc.error_count()} problems, first: {_first(exc)}); "
                "was the run written by another version of envhub-trainer?"
            ) from None
    return rows


def steps(rows: list[StepMetrics | EvalMetrics]) -> list[StepMetrics]:
    """The training steps' rows, without the step-0 evaluation."""
    return [r for r in rows if isinstance(r, StepMetrics)]


def _first(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc']))}: {error['msg']}"
