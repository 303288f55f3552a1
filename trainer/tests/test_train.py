"""GRPO end to end on a tiny model: the reward rises and the engine samples with the trained weights."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
from envhub_trainer import memory
from envhub_trainer.config import TrainConfig
from envhub_trainer.engine import weights_checksum
from envhub_trainer.grpo import train
from envhub_trainer.testing import Digits
from envhub_trainer.testing import digits_config as config
from transformers import AutoModelForCausalLM

import envhub
from envhub.core import InfrastructureError


def test_grpo_raises_the_reward_and_updates_the_engine(tiny_model: Path, tmp_path: Path) -> None:
    rows = train(config(tiny_model, tmp_path / "run"))
    rewards = [r["reward_mean"] for r in rows]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.2, rewards
    checksums = [r["weights_checksum"] for r in rows if "weights_checksum" in r]
    assert (
        len(set(checksums)) == len(checksums) == 11
    )  # a new, verified version after every step but the last
    assert checksums[0] != weights_checksum(
        AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True).state_dict()
    )
    assert [r["staleness"] for r in rows] == [0] * 12
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == list(range(1, 13))


def test_resume_continues_the_same_curve(tiny_model: Path, tmp_path: Path) -> None:
    same = {"checkpoint_every": 2, "verify_sync": False}
    whole = train(config(tiny_model, tmp_path / "whole", steps=4, **same))
    train(config(tiny_model, tmp_path / "split", steps=2, **same))
    resumed = train(config(tiny_model, tmp_path / "split", steps=4, **same))
    assert [r["step"] for r in resumed] == [3, 4]
    assert [r["reward_mean"] for r in resumed] == pytest.approx([r["reward_mean"] for r in whole[2:]])
    assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in whole[2:]], rel=1e-4, abs=1e-6)
    logged = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in logged] == [1, 2, 3, 4]
    # one row per start, which keeps what moved its speed: the second says where it picked up
    starts = [json.loads(line) for line in (tmp_path / "split" / "runtime.jsonl").read_text().splitlines()]
    assert [s["resumed_from_step"] for s in starts] == [None, 2]
    # PyTorch decides huge pages once a process: a large tensor now gets what the record says the run got
    now = memory._huge_page_eligible(torch.empty(4 * 2**20, dtype=torch.uint8).data_ptr())
    assert [s["huge_pages"] for s in starts] == [now, now]
    assert all(s["torch_threads"] == torch.get_num_threads() for s in starts)


def test_async_trains_one_version_behind(tiny_model: Path, tmp_path: Path) -> None:
    run = config(
        tiny_model, tmp_path / "async", steps=4, verify_sync=False, tensorboard=True, **{"async": True}
    )
    rows = train(run)
    assert list((tmp_path / "async" / "tb").iterdir())  # TensorBoard events, when it is installed
    assert [r["staleness"] for r in rows] == [0, 1, 1, 1]
    assert all(r["dropped_stale_episodes"] == 0 for r in rows)
    assert rows[-1]["is_weight_mean"] != 1.0  # stale samples were reweighted


def test_async_with_zero_staleness_drops_and_counts_stale_batches(tiny_model: Path, tmp_path: Path) -> None:
    rows = train(
        config(tiny_model, tmp_path / "drop", steps=2, max_staleness=0, verify_sync=False, **{"async": True})
    )
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[-1]["dropped_stale_episodes"] == 24  # one batch of 4 tasks x 6 episodes


def test_bfloat16_weights_train_and_reach_the_engine(tiny_model: Path, tmp_path: Path) -> None:
    """The GPU configuration's dtype, run on CPU: the step's loss is finite and the weights move."""
    from safetensors.torch import load_file

    rows = train(config(tiny_model, tmp_path / "bf16", steps=2, dtype="bfloat16", verify_sync=False))
    assert all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in rows)
    saved = load_file(tmp_path / "bf16" / "checkpoint" / "model" / "model.safetensors")
    assert {t.dtype for t in saved.values()} == {torch.bfloat16}


def test_data_parallel_on_a_gpu_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="use device: cpu, or data_parallel: 1"):
        TrainConfig(model=Path("m"), env_id="x", data_parallel=2, device="cuda")


class Flaky(Digits):
    """Digits on failing machinery: every fourth env set-up fails, and every one of task `HOPELESS`."""

    HOPELESS = 2
    plays = 0

    def setup(self, rng: random.Random) -> str:
        Flaky.plays += 1
        if self.seed == self.HOPELESS or Flaky.plays % 4 == 0:
            raise InfrastructureError("the sandbox died while starting")
        return super().setup(rng)


envhub.register("flaky-digits-v0", Flaky, override=True)


def test_failed_episodes_are_re_run_and_a_group_is_never_trained_short(
    tiny_model: Path, tmp_path: Path
) -> None:
    Flaky.plays = 0
    rows = train(config(tiny_model, tmp_path / "flaky", env_id="flaky-digits-v0", steps=2, verify_sync=False))
    first, second = rows  # tasks 0-3, then 4-7; 6 episodes each; task 2 fails through its 2 re-runs
    assert first["samples"] == 3 * 6  # the three whole groups, one sample per single-turn episode
    assert (first["failed_groups"], first["episode_errors"]) == (1, 6)
    assert first["episode_reruns"] > 6 * 2  # task 2's, and the re-runs that fixed the others
    assert (second["failed_groups"], second["episode_errors"], second["samples"]) == (0, 0, 4 * 6)
    assert second["episode_reruns"] > 0
