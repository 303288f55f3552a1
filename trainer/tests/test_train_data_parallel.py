"""`data_parallel: 2` end to end over two CPU processes (gloo, FSDP2): the same run as one process.

Rank 0 is the test's own process (it rolls out, so the environment registered below is there); the
spawned rank only trains, so it needs no environment.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import yaml
from envhub_trainer import distributed, launch
from envhub_trainer.config import TrainConfig
from envhub_trainer.grpo import train
from envhub_trainer.loss import LossStats
from envhub_trainer.testing import digits_config
from safetensors.torch import load_file
from torch.multiprocessing.spawn import ProcessRaisedException


def config(model: Path, run_dir: Path, **overrides: object) -> TrainConfig:
    """The digits run, two steps, with several micro-batches a rank (uneven counts: test_distributed.py)."""
    return digits_config(
        model, run_dir, **{"steps": 2, "micro_batch_size": 4, "checkpoint_every": 2, **overrides}
    )


def assert_same_curve(rows: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [r["step"] for r in rows] == [r["step"] for r in expected]
    # Rank 0 samples exactly as one process: rewards are equal, not close.
    assert [r["reward_mean"] for r in rows] == [r["reward_mean"] for r in expected]
    assert [r["trained_tokens"] for r in rows] == [r["trained_tokens"] for r in expected]
    for key in ("loss", "grad_norm", *LossStats().means()):  # KL, clip fraction, IS weights: the step's
        assert [r[key] for r in rows] == pytest.approx([r[key] for r in expected], rel=1e-4, abs=1e-7), key


def test_balance_splits_by_tokens_and_repeats() -> None:
    lengths = [10, 1, 1, 1, 9, 2]  # round robin would give 20 tokens and 4
    shares = distributed.balance(lengths, 2)
    assert shares == [[0, 1, 2], [3, 4, 5]] == distributed.balance(lengths, 2)
    assert [sum(lengths[i] for i in share) for share in shares] == [12, 12]
    assert distributed.balance(lengths, 1) == [list(range(6))]
    assert distributed.balance([3], 2) == [[0], []]


@pytest.mark.parametrize(("started", "configured"), [(4, 2), (1, 2), (2, 1)])
def test_torchrun_world_must_match_the_config(
    started: int, configured: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", str(started))
    ranks = launch.ranks(config(tmp_path, tmp_path, data_parallel=configured), train)
    expected = rf"torchrun started {started} processes .* data_parallel: {configured}"
    with pytest.raises(ValueError, match=expected), ranks:
        pass


def _collect_runs(model: Path, root: Path) -> None:
    """Two steps on one process and on two; both resumed to four steps on two; four straight on one;
    three async steps with KL on one and on two. Saved to root/runs.pt for the tests to compare."""
    out: dict[str, Any] = {"root": root}
    out["one"] = train(config(model, root / "one"))
    out["two"] = train(config(model, root / "two", data_parallel=2))
    for name in ("one", "two"):
        checkpoint = root / name / "checkpoint"
        out[f"{name}_weights"] = load_file(checkpoint / "model" / "model.safetensors")
        out[f"{name}_optimiser"] = torch.load(checkpoint / "trainer.pt", weights_only=False)["optimiser"]
    out["two_resumed"] = train(config(model, root / "two", steps=4, data_parallel=2))
    out["one_resumed"] = train(config(model, root / "one", steps=4, data_parallel=2))
    out["straight"] = train(config(model, root / "straight", steps=4))
    # The KL reference stays whole on every rank (it runs on real micro-batches only): checked here too.
    options = {
        "steps": 3,
        "verify_sync": False,
        "checkpoint_every": 0,
        "async": True,
        "loss": {"kl_coef": 0.1},
    }
    out["async_one"] = train(config(model, root / "async-one", **options))
    out["async_two"] = train(config(model, root / "async-two", data_parallel=2, **options))
    torch.save(out, root / "runs.pt")


@pytest.fixture(scope="module")
def runs(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The runs of `_collect_runs`, made in a child process: a crash of a gloo process (seen once in
    about 20 runs, at exit, not reproduced since) then fails these tests instead of ending pytest."""
    root = tmp_path_factory.mktemp("dp")
    child = multiprocessing.get_context("spawn").Process(target=_collect_runs, args=(tiny_model, root))
    child.start()
    child.join(timeout=600)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0, f"the process making the runs ended with exit code {child.exitcode}"
    result: dict[str, Any] = torch.load(root / "runs.pt", weights_only=False)
    return result


@pytest.mark.slow  # each data-parallel run spawns a process that imports torch and transformers
def test_two_ranks_train_like_one_process(runs: dict[str, Any]) -> None:
    assert_same_curve(runs["two"], runs["one"])
    assert runs["two"][0]["weights_checksum"]  # verified after step 1: the engine got the gathered weights
    one, two = runs["one_weights"], runs["two_weights"]
    assert one.keys() == two.keys()
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
def test_the_checkpoint_format_does_not_depend_on_the_ranks(runs: dict[str, Any]) -> None:
    one, two = runs["one_optimiser"], runs["two_optimiser"]
    assert two["param_groups"] == one["param_groups"]
    assert two["state"].keys() == one["state"].keys()
    for index, state in one["state"].items():
        assert two["state"][index].keys() == state.keys()
        for key, value in state.items():
            torch.testing.assert_close(
                two["state"][index][key], value, rtol=1e-4, atol=1e-6, msg=f"{index} {key}"
            )


@pytest.mark.slow
def test_resume_on_two_ranks_continues_the_same_curve(runs: dict[str, Any]) -> None:
    straight = runs["straight"][2:]
    assert_same_curve(runs["two_resumed"], straight)  # a data-parallel checkpoint, resumed on two ranks
    assert_same_curve(runs["one_resumed"], straight)  # a single-process checkpoint, resumed on two ranks
    logged = (runs["root"] / "two" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in logged] == [1, 2, 3, 4]


@pytest.mark.slow
def test_async_with_kl_on_two_ranks_trains_like_one_process(runs: dict[str, Any]) -> None:
    two = runs["async_two"]
    assert [r["staleness"] for r in two] == [0, 1, 1]
    assert two[-1]["kl"] > 0
    assert_same_curve(two, runs["async_one"])


@pytest.mark.slow
@pytest.mark.timeout(120, method="thread")  # a hang fails the test (and ends pytest) instead of waiting
def test_a_rollout_error_on_rank_0_ends_every_rank(
    tiny_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(KeyError, match="no-such-env"):
        train(config(tiny_model, tmp_path / "run", env_id="no-such-env-v0", data_parallel=2))
    assert not multiprocessing.active_children()
    assert "terminating" not in caplog.text  # the spawned rank ended on rank 0's stop, not killed
    assert not dist.is_initialized()


def _fail(config: TrainConfig) -> None:
    raise ValueError("rank 1 broke")


@pytest.mark.slow
@pytest.mark.timeout(120, method="thread")
def test_an_error_on_a_spawned_rank_is_raised_with_its_traceback(tmp_path: Path) -> None:
    ranks = launch.ranks(config(tmp_path, tmp_path, data_parallel=2), _fail)
    with pytest.raises(ProcessRaisedException, match="rank 1 broke"), ranks:
        dist.barrier()  # rank 1 never gets here: gloo says so, and the launcher finds out why
    assert not multiprocessing.active_children()
    assert not dist.is_initialized()


def cli_config(model: Path, directory: Path, env_id: str) -> Path:
    path = directory / "run.yaml"
    options = {
        "model": str(model), "env_id": env_id, "max_turns": 1, "run_dir": "run", "steps": 2,
        "tasks_per_step": 2, "group_size": 2, "max_new_tokens": 4, "tensorboard": False, "data_parallel": 2,
    }  # fmt: skip
    path.write_text(yaml.safe_dump(options))
    return path


@pytest.mark.slow
@pytest.mark.timeout(120, method="thread")
def test_envhub_train_spawns_the_ranks_and_shows_the_progress(tiny_model: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "envhub", "train", str(cli_config(tiny_model, tmp_path, "guess-number"))]
    result = subprocess.run(command, capture_output=True, text=True, timeout=110)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2/2" in result.stdout  # rank 0 is the command's own process: on_step reached the progress bar
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2


@pytest.mark.slow
@pytest.mark.timeout(120, method="thread")
def test_envhub_train_under_torchrun(tiny_model: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "envhub"]
    result = subprocess.run(
        [*command, "train", str(cli_config(tiny_model, tmp_path, "guess-number"))],  # built in: found anew
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("run written to") == 1  # rank 0 reports; rank 1 only trains
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2
    assert (tmp_path / "run" / "checkpoint" / "trainer.pt").exists()
