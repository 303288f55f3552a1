"""Training episodes are played by `envhub.rollout`: the runner's timeouts and re-runs apply, and every
step's episodes are stored as a batch folder that `envhub show` and the store's reader open."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
from pathlib import Path

from envhub_trainer.grpo import train
from envhub_trainer.run_folder import Run
from envhub_trainer.samples import episode_samples
from envhub_trainer.testing import digits_config as config
from typer.testing import CliRunner

import envhub
from envhub.cli import app
from envhub.store import read_episodes


class Hangs(envhub.SingleTurnEnv):
    """The digits env (reward: the share of digits in the reply), but its env step never returns for
    task `HUNG`: the reward waits for ever."""

    HUNG = 1

    def setup(self, rng: random.Random) -> str:
        self.task = self.seed
        return f"Say a number like {rng.randint(0, 99)}."

    @envhub.reward
    async def digits(self, answer: str) -> float:
        if self.task == self.HUNG:
            await asyncio.Event().wait()  # nobody sets it: the step hangs until the runner gives up
        return sum(c.isdigit() for c in answer) / max(len(answer), 1)


envhub.register("hangs-digits-v0", Hangs, override=True)


def test_a_hung_env_step_ends_as_a_timeout_and_its_group_is_dropped(tiny_model: Path, tmp_path: Path) -> None:
    """Task 1's step hangs: the runner's step timeout ends each attempt as a `timeout` (an infrastructure
    failure), the episode is re-run once with a fresh env, and since it still fails its group is dropped
    whole, as grpo.py's hardening rule says; the other groups train, and the run goes on."""
    run_dir = tmp_path / "hung"
    rows = train(
        config(
            tiny_model,
            run_dir,
            env_id="hangs-digits-v0",
            steps=1,
            tasks_per_step=3,
            group_size=2,
            concurrency=6,
            step_timeout=10.0,  # far above a tiny model's turn, even on a busy machine
            episode_retries=1,
            verify_sync=False,
        )
    )
    [row] = rows
    assert (row["failed_groups"], row["episode_errors"], row["samples"]) == (1, 2, 2 * 2)
    assert row["episode_reruns"] >= 2  # each of task 1's episodes was played twice
    stored = read_episodes(run_dir / "episodes" / "step-0001")
    assert [e.seed for e in stored] == [0, 0, 1, 1, 2, 2]
    hung = [e for e in stored if e.seed == Hangs.HUNG]
    for episode in hung:
        assert episode.error is not None and episode.error.kind == "timeout", episode.error
        assert "step timeout (10 s)" in episode.error.message
        assert episode.attempts == 2
    assert all(e.error is None for e in stored if e.seed != Hangs.HUNG)


def test_a_training_runs_episodes_open_with_envhub_show(tiny_model: Path, tmp_path: Path) -> None:
    """Each step's episodes, and each evaluation's, are a batch folder under RUN/episodes: the store's
    reader gives back exactly the episodes trained on (their token samples are the step's), with the
    runner's per-turn policy time, and `envhub show` lists and prints them."""
    run_dir = tmp_path / "run"
    rows = train(
        config(
            tiny_model,
            run_dir,
            steps=2,
            tasks_per_step=2,
            group_size=3,
            eval_every=2,
            eval_tasks=2,
            verify_sync=False,
        )
    )
    folders = sorted(p.name for p in (run_dir / "episodes").iterdir())
    assert folders == ["eval-step-0000", "eval-step-0002", "step-0001", "step-0002"]
    for row in rows:
        stored = read_episodes(run_dir / "episodes" / f"step-{row['step']:04d}")
        assert len(stored) == 2 * 3 and all(e.error is None for e in stored)
        assert statistics.fmean(e.reward for e in stored) == row["reward_mean"]
        trained = [s for e in stored for s in episode_samples(e, group=0, version=row["version"] - 1)]
        assert len(trained) == row["samples"]
        assert all(t.tokens is not None and t.info["policy_seconds"] > 0 for e in stored for t in e.turns)
    evaluated = read_episodes(run_dir / "episodes" / "eval-step-0002")
    assert [e.seed for e in evaluated] == [1_000_000, 1_000_001]
    eval_rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert eval_rows[-1]["eval_reward"] == statistics.fmean(e.reward for e in evaluated)

    shown = CliRunner().invoke(app, ["show", str(run_dir / "episodes" / "step-0002")])
    assert shown.exit_code == 0, shown.output
    assert "6 of 6 episodes (complete)" in shown.output
    episode = CliRunner().invoke(app, ["show", str(run_dir / "episodes" / "step-0002"), "--episode", "5"])
    assert episode.exit_code == 0, episode.output
    assert "Say a number like" in episode.output


def test_a_resume_drops_the_episodes_written_after_its_checkpoint(tmp_path: Path) -> None:
    """As the log rows after the checkpoint go, so do the episode folders of later steps and batches no
    step was named for (a crash mid-rollout leaves one), so the run folder describes one unbroken run."""
    run = Run(tmp_path)
    names = ["step-0001", "step-0002", "step-0003", "eval-step-0000", "eval-step-0003", "incoming-0"]
    for name in names:
        (run.episodes / name).mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (0, 1, 2, 3)))
    run.truncate_after(2)
    assert sorted(p.name for p in run.episodes.iterdir()) == ["eval-step-0000", "step-0001", "step-0002"]
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [
        0,
        1,
        2,
    ]
    assert run.incoming().name == "incoming-0"  # the name is free again
