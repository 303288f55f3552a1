"""metrics.jsonl is read through the rows the trainer writes (`envhub_trainer.metrics`): misfits fail."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from envhub.cli import app

STEP = {
    "step": 1, "version": 1, "reward_mean": 0.5, "reward_std": 0.1, "pass_rate": 0.5, "loss": 0.2,
    "grad_norm": 1.0, "trained_tokens": 64.0, "clip_fraction": 0.0, "kl": 0.0, "ratio_mean": 1.0,
    "is_weight_mean": 1.0, "is_weight_min": 1.0, "is_weight_max": 1.0, "is_capped_fraction": 0.0,
    "staleness": 0, "dropped_stale_episodes": 0, "dropped_groups": 0, "episode_errors": 0,
    "episode_reruns": 0, "failed_groups": 0, "sample_splits": 0, "truncated_samples": 0, "samples": 4,
    "rollout_seconds": 2.0, "rollout_wait_seconds": 2.0, "generation_seconds": 1.5, "env_seconds": 0.5,
    "train_seconds": 3.0, "sync_seconds": 0.1, "rollout_tokens_per_second": 10.0,
    "train_tokens_per_second": 20.0, "prefix_cache_hit_rate": 0.25,
}  # fmt: skip


def write(run_dir: Path, *lines: str) -> Path:
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return run_dir


def test_report_reads_steps_the_step_zero_eval_and_skips_a_half_written_line(tmp_path: Path) -> None:
    run = write(
        tmp_path / "run",
        json.dumps({"step": 0, "eval_reward": 0.25, "version": 0}),
        json.dumps({**STEP, "eval_reward": 0.75}),
        json.dumps({**STEP, "step": 2})[:40],  # the writer is mid-line
    )
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    page = (run / "report.html").read_text()
    assert "1 steps logged; latest step 1, reward 0.500" in page
    assert "generation</td><td>1.5 s" in page


def test_a_row_the_trainer_does_not_write_is_an_error_naming_line_and_field(tmp_path: Path) -> None:
    renamed = {k: v for k, v in STEP.items() if k != "reward_mean"} | {"mean_reward": 0.5}
    run = write(tmp_path / "run", json.dumps(STEP), json.dumps(renamed))
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 2
    assert f"{run / 'metrics.jsonl'}:2 is not a metrics row this trainer writes" in result.output
    assert "reward_mean" in result.output
