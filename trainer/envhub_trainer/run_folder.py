"""A run's folder on disk: its logs, its checkpoint, and the episodes of every step as envhub batches.

    RUN/config.json              the config the run was started with
    RUN/metrics.jsonl            one row per step (and the evaluations), read by `envhub report`
    RUN/samples.jsonl            a few episodes per step, as text, for the report
    RUN/runtime.jsonl            one row per start (resumes too): huge pages, malloc, threads, torch
    RUN/checkpoint/              model, optimiser, RNG states, data position (replaced atomically)
    RUN/episodes/step-0003/      the episodes step 3 trained on: a batch folder `envhub show` opens
    RUN/episodes/eval-step-0005/ the greedy held-out episodes of the evaluation after step 5
    RUN/tb/                      TensorBoard events, when installed

A batch is played into `episodes/incoming-N/` and renamed after the step that trains on it, since an
asynchronous run starts a batch before it knows which step will use it (or whether one will: a batch
dropped as stale is deleted with its folder). On resume, every folder written after the checkpoint
goes, as the log rows do, so the run's folder always describes one unbroken run.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

EPISODES = "episodes"
_STEP_FOLDER = re.compile(r"(?:eval-)?step-(\d+)")


def step_folder(step: int) -> str:
    """The folder of the episodes step `step` trained on."""
    return f"step-{step:04d}"


def eval_folder(step: int) -> str:
    """The folder of the evaluation run after step `step` (0: before the first)."""
    return f"eval-step-{step:04d}"


@dataclass
class Run:
    """The files of a run directory (see the module's docstring)."""

    directory: Path
    tensorboard: Any = None
    _incoming: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def checkpoint(self) -> Path:
        return self.directory / "checkpoint"

    @property
    def episodes(self) -> Path:
        return self.directory / EPISODES

    def log(self, name: str, row: dict[str, Any]) -> None:
        with (self.directory / name).open("a") as f:
            f.write(json.dumps(row) + "\n")

    def incoming(self) -> Path:
        """A fresh folder name for a batch whose step is not known yet."""
        while (path := self.episodes / f"incoming-{next(self._incoming)}").exists():
            pass
        return path

    def keep(self, batch: Path, name: str) -> Path:
        """Name a played batch after the step that used it (`step_folder`)."""
        target = self.episodes / name
        shutil.rmtree(target, ignore_errors=True)  # only a left-over of a failed run can be there
        batch.rename(target)
        return target

    def truncate_after(self, step: int) -> None:
        """Drop what was written after the checkpoint we resume from (log rows, episode folders), so the
        curve and the episodes continue without overlap."""
        for name in ("metrics.jsonl", "samples.jsonl"):
            path = self.directory / name
            if path.exists():
                rows = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= step]
                path.write_text("".join(r + "\n" for r in rows))
        self.drop_episodes_after(step)

    def drop_episodes_after(self, step: int) -> None:
        """Delete the episode folders of steps after `step`, and batches no step was named for."""
        if not self.episodes.is_dir():
            return
        for folder in self.episodes.iterdir():
            numbered = _STEP_FOLDER.fullmatch(folder.name)
            if numbered is None or int(numbered.group(1)) > step:
                shutil.rmtree(folder, ignore_errors=True)


def save_checkpoint(
    run: Run,
    model: Any,
    weights: dict[str, torch.Tensor],
    tokenizer: Any,
    optimiser_state: dict[str, Any],
    state: dict[str, Any],
) -> None:
    """Model, optimiser, step, weight version, RNG states and data position, replaced atomically.

    `weights` and `optimiser_state` are whole (gathered from every rank under data parallel) and in the
    format one process writes, so a checkpoint resumes with any `data_parallel`."""
    staging = run.directory / "checkpoint.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging / "model", state_dict=weights)
    tokenizer.save_pretrained(staging / "model")
    torch.save(
        {
            "optimiser": optimiser_state,
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        },
        staging / "trainer.pt",
    )
    (staging / "state.json").write_text(json.dumps(state))
    shutil.rmtree(run.checkpoint, ignore_errors=True)
    staging.rename(run.checkpoint)


def load_checkpoint(run: Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checkpoint's state (step, version, sampler, engine RNG) and the optimiser state; restores
    torch's and Python's RNG states as they were saved."""
    state: dict[str, Any] = json.loads((run.checkpoint / "state.json").read_text())
    extra = torch.load(run.checkpoint / "trainer.pt", weights_only=False)
    torch.set_rng_state(extra["torch_rng"])
    random.setstate(extra["python_rng"])
    return state, extra["optimiser"]
