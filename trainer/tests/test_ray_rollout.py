"""GRPO with `ray: true`: the run one process would make, its episodes played by envhub's Ray backend
(the one `envhub rollout --backend ray` uses) against engine actors; a killed episode actor is
restarted, a killed rollout worker stops the run.

The env of these tests is registered here, in the test process only. The Ray actors get it because
envhub's backend sends the driver's registration of an env that is not a plugin to its episode actors,
and this module is pickled by value (`register_pickle_by_value`): the actors could not import it by
name, as pytest puts trainer/tests on the driver's `sys.path` only. A training script's own env
(`__main__`) is pickled by value anyway; a plugin env is found by the actors' own registry.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from envhub_trainer.config import TrainConfig
from envhub_trainer.engine import weights_checksum
from envhub_trainer.grpo import train
from transformers import AutoModelForCausalLM

import envhub
from envhub.rollout.ray_runner import RayWorkerLost
from envhub.store import read_episodes
from tests.envhub_testkit.processes import ray_actor_pids

ray = pytest.importorskip("ray", reason="ray: true needs Ray: pip install 'envhub-core[ray]'")


class Alnum(envhub.SingleTurnEnv):
    """The reward is the share of the reply's characters that are letters or digits: the tiny model's
    random replies vary in it, so every step trains. Notes each episode's process in `pid_file`."""

    def __init__(self, *, pid_file: str, delay: float = 0.0) -> None:
        super().__init__()
        self.pid_file, self.delay = Path(pid_file), delay

    def setup(self, rng: random.Random) -> str:
        with self.pid_file.open("a") as f:
            f.write(f"{os.getpid()}\n")
        return f"Say a number like {rng.randint(0, 99)}."

    @envhub.reward
    async def alnum(self, answer: str) -> float:
        await asyncio.sleep(self.delay)  # keeps episodes in flight, for the kill tests
        return sum(c.isascii() and c.isalnum() for c in answer) / max(len(answer), 1)


envhub.register("alnum-ray-test-v0", Alnum, override=True)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def config(model: Path, run_dir: Path, **overrides: object) -> TrainConfig:
    options: dict[str, object] = {
        "model": model,
        "env_id": "alnum-ray-test-v0",
        "env_kwargs": {"pid_file": str(run_dir / "pids")},
        "run_dir": run_dir,
        "steps": 3,
        "tasks_per_step": 2,
        "group_size": 4,
        "lr": 5e-3,
        "concurrency": 1,
        "max_new_tokens": 4,
        "checkpoint_every": 0,
        "verify_sync": True,
        "tensorboard": False,
        "pass_threshold": 0.5,
    }
    return TrainConfig.model_validate({**options, **overrides})


def pids(run_dir: Path) -> list[int]:
    path = run_dir / "pids"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_importing_the_trainer_does_not_import_ray() -> None:
    code = (
        "import sys, envhub_trainer, envhub_trainer.grpo\n"
        "assert 'ray' not in sys.modules, 'import envhub_trainer imported Ray'\n"
        "sys.modules['ray'] = None  # as if Ray were not installed\n"
        "import envhub_trainer.ray_rollout\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "ModuleNotFoundError: ray: true needs Ray" in result.stderr, result.stderr
    assert "pip install 'envhub-core[ray]'" in result.stderr


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Ray starts actors with OMP_NUM_THREADS=1, so the engine actor's torch uses one thread; the driver
    must too for bit-equal runs, since the thread count changes float rounding (by ~1e-7 here). The
    driver's tensor ops run on the process's tensor thread, which an earlier test may have started with
    two: each call there carries this thread's count over (`tensor_thread`), which this test relies on."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_ray_run_is_the_one_process_run_played_by_actors(
    tiny_model: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    """With `concurrency: 1` both runs ask the engine for the same turns in the same order, so they draw
    the same sampling seeds (the engine actor has the in-process engine's seed), and with the same torch
    thread count the runs are equal bit for bit: Ray changes only where the work runs. (With the
    driver on more threads the rewards still match here, but logprobs, the loss and so the weights
    differ in the last bits.)"""
    local = train(config(tiny_model, tmp_path / "local"))
    remote = train(config(tiny_model, tmp_path / "ray", ray=True))
    measured = {k for k in local[0] if k.endswith(("_seconds", "_per_second", "_gib"))}  # time, memory
    assert [sorted(r) for r in remote] == [sorted(r) for r in local]
    assert [{k: v for k, v in r.items() if k not in measured} for r in remote] == [
        {k: v for k, v in r.items() if k not in measured} for r in local
    ]  # rewards, losses and (verify_sync checked them against the trainer's) the engine's weights
    assert len({r["reward_mean"] for r in remote}) > 1  # sampling happened: equal means something
    assert all(r["samples"] == 8 and r["episode_errors"] == 0 for r in remote)
    assert all(r["generation_seconds"] > 0 and r["env_seconds"] >= 0 for r in remote)
    assert set(pids(tmp_path / "local")) == {os.getpid()}
    played_in = pids(tmp_path / "ray")
    assert len(played_in) == 3 * 8 and os.getpid() not in played_in
    for step in ("step-0001", "step-0003"):  # both stored alike, whoever played them
        stored = [read_episodes(tmp_path / run / "episodes" / step) for run in ("local", "ray")]
        assert [(e.seed, e.reward, e.messages) for e in stored[1]] == [
            (e.seed, e.reward, e.messages) for e in stored[0]
        ]
    assert not ray.is_initialized()  # the engine's actors, and the Ray it started, ended with the run


def kill_when_started(run_dir: Path, episodes: int, actor: str, killed: list[int]) -> threading.Thread:
    """A thread that SIGKILLs one `actor` process once `episodes` episodes have started (mid-step: the
    env's reward waits 0.5 s, so episodes are in flight), noting the pid and how many had started."""

    def kill() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(pids(run_dir)) < episodes:
            time.sleep(0.02)
        if victims := ray_actor_pids(actor):
            killed.extend([min(victims), len(victims), len(pids(run_dir))])
            os.kill(min(victims), signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_killed_env_worker_is_restarted_and_its_episodes_rerun(tiny_model: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "kill"
    killed: list[int] = []
    killer = kill_when_started(run_dir, 3, "EpisodeWorker", killed)
    slow = {"pid_file": str(run_dir / "pids"), "delay": 0.5}
    rows = train(config(tiny_model, run_dir, ray=True, steps=2, concurrency=4, env_kwargs=slow))
    killer.join(timeout=1)
    victim, workers, started = killed
    assert workers == 2 and started < 16, "an episode actor must die mid-run"
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["samples"] == 8 and r["episode_errors"] == 0 for r in rows)
    played_in = pids(run_dir)
    assert victim in played_in
    assert len(played_in) > 16, "Ray must have re-run the killed actor's in-flight episodes"


@pytest.mark.slow
def test_killed_rollout_worker_stops_the_run_with_a_clear_error(tiny_model: Path, tmp_path: Path) -> None:
    """Two rollout workers: step 1 syncs both (verify_sync checks each), then one dies in step 2. A
    restarted one would sample with the starting weights, so it is not restarted: the run stops at the
    next call to the workers (the sync after step 2), saying which worker and what to do."""
    run_dir = tmp_path / "engine"
    killed: list[int] = []
    killer = kill_when_started(run_dir, 10, "RolloutWorker", killed)
    slow = {"pid_file": str(run_dir / "pids"), "delay": 0.5}
    run = config(
        tiny_model, run_dir, ray=True, rollout_workers=2, env_workers=1, concurrency=4, env_kwargs=slow
    )
    with pytest.raises(RayWorkerLost, match="a rollout worker died") as failure:
        train(run)
    killer.join(timeout=1)
    _, workers, started = killed
    assert workers == 2 and started >= 10, "a rollout worker must die in step 2"
    [step_1] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True).state_dict()
    assert step_1["weights_checksum"] != weights_checksum(start)  # both workers took the new weights
    del failure  # the traceback holds the engine; once it is collected, its actors and its Ray end
    gc.collect()
    assert not ray.is_initialized()


@pytest.mark.vllm
@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed in this venv: `make test-vllm` runs this in one that has it",
)
def test_vllm_rollout_workers_on_ray(tmp_path: Path) -> None:
    """Two vLLM engines, one per actor process (in one process a second `LLM` is trouble): every sync
    reaches both (their checksums must agree, or `checksum()` raises) and changes their weights."""
    from envhub.testing.tiny_model import tiny_chat_model

    model = tiny_chat_model(tmp_path / "model", hidden_size=128, heads=2)  # vLLM CPU wants head_dim 64
    run = config(model, tmp_path / "run", ray=True, engine="vllm", rollout_workers=2, concurrency=2)
    rows = train(run)
    assert all(r["samples"] == 8 and r["episode_errors"] == 0 for r in rows)
    checksums = [r["weights_checksum"] for r in rows[:2]]
    assert len(set(checksums)) == 2
    assert not ray.is_initialized()
