"""The Ray backend: the same episodes as the asyncio runner, the same batch on disk, and no episode lost
or run twice when a Ray worker process is killed mid-batch."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envhub.policies import OraclePolicy, load_policy
from envhub.records import Episode
from envhub.rollout import RolloutLimits, plan, rollout, run_batch
from envhub.rollout.ray_runner import ACTOR_RESTARTS, RayWorkerLost, run_batch_ray
from envhub.store import read_episodes
from tests.envhub_testkit.processes import ray_actor_pids

ray = pytest.importorskip("ray", reason="the Ray backend needs Ray: pip install 'envhub-core[ray]'")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray(plugin_site: Path) -> Iterator[None]:
    """One local Ray instance for the module (starting one takes seconds); its workers see the plugins."""
    ray.init(
        num_cpus=2,
        address="local",
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(plugin_site)}},
    )
    yield
    ray.shutdown()


def content(episode: Episode) -> dict[str, Any]:
    """Everything an episode records except when and where it ran and how long it took (its turns' policy
    time too)."""
    untimed = [
        turn.model_copy(update={"info": {k: v for k, v in turn.info.items() if k != "policy_seconds"}})
        for turn in episode.turns
    ]
    return episode.model_copy(update={"turns": untimed}).model_dump(
        exclude={"started_at", "wall_seconds", "node"}
    )


async def test_ray_plays_the_same_episodes_as_the_local_runner(local_ray: None) -> None:
    seen: list[Episode] = []
    remote = await run_batch_ray(
        "arithmetic",
        "oracle",
        episodes=range(12),
        seed=100,
        limits=RolloutLimits(concurrency=4),
        env_kwargs={},
        on_episode=seen.append,
    )
    local = await run_batch("arithmetic", OraclePolicy(), episodes=12, seed=100)
    assert [e.episode_id for e in remote.episodes] == [f"{i:06d}" for i in range(12)]
    assert [content(e) for e in remote.episodes] == [content(e) for e in local.episodes]
    assert sorted(e.episode_id for e in seen) == [e.episode_id for e in remote.episodes]
    assert all(e.reward > 0 and e.terminated for e in remote.episodes)
    assert {e.node for e in remote.episodes} == {ray.get_runtime_context().get_node_id()}  # the one node
    assert {e.node for e in local.episodes} == {None}
    assert remote.not_started == []


async def test_fork_groups_on_ray_equal_the_local_fork_batch(local_ray: None) -> None:
    """Each call sends an actor one whole group: its prefix, then the children forked from its env."""
    refs = plan(4, rollouts=3)  # 4 tasks, each a prefix and 2 children
    oracle = functools.partial(load_policy, "oracle")
    remote = await rollout(
        "guess-number", oracle, episodes=refs, fork_at=1, runs_on="ray", limits=RolloutLimits(concurrency=2)
    )
    local = await rollout("guess-number", oracle, episodes=refs, fork_at=1)
    assert [content(e) for e in remote.episodes] == [content(e) for e in local.episodes]
    parents = [e.parent for e in remote.episodes]
    assert parents == [None, "000000", "000000", None, "000003", "000003", None, "000006", "000006", None,
                       "000009", "000009"]  # fmt: skip
    assert all(e.fork_turn == 1 and e.reward == 1.0 for e in remote.episodes if e.parent is not None)
    assert {e.node for e in remote.episodes} == {ray.get_runtime_context().get_node_id()}


async def test_time_budget_cuts_off_stragglers_and_leaves_the_rest_for_resume(local_ray: None) -> None:
    result = await run_batch_ray(
        "testplug/slow",
        "oracle",
        episodes=range(30),
        seed=0,
        limits=RolloutLimits(concurrency=2, time_budget=1.5),
        env_kwargs={"delay": 0.2},
        on_episode=None,
    )
    played = [int(e.episode_id) for e in result.episodes]
    assert result.not_started, "the budget must run out before the batch ends for this test to mean anything"
    assert sorted(played + result.not_started) == list(range(30))
    cut = [e for e in result.episodes if e.error is not None]
    assert cut and all(e.error.kind == "cutoff" and e.truncated for e in cut if e.error)


async def test_killed_ray_worker_is_restarted_and_its_episodes_rerun_exactly_once(
    local_ray: None, tmp_path: Path
) -> None:
    seen: list[Episode] = []
    release = tmp_path / "release"  # episodes from seed 16 on wait for it: the kill lands mid-batch
    midway = asyncio.Event()

    def record(episode: Episode) -> None:
        seen.append(episode)
        if len(seen) == 8:
            midway.set()

    stale = ray_actor_pids("EpisodeWorker")  # earlier tests' actors may not have exited yet
    batch = asyncio.create_task(
        run_batch_ray(
            "testplug/slow",
            "oracle",
            episodes=range(60),
            seed=0,
            limits=RolloutLimits(concurrency=4),
            env_kwargs={"delay": 0.05, "hold_from": 16, "release": str(release)},
            on_episode=record,
        )
    )
    await asyncio.wait_for(midway.wait(), timeout=60)
    before = ray_actor_pids("EpisodeWorker") - stale
    assert len(before) == 2
    victim = min(before)
    os.kill(victim, signal.SIGKILL)  # both its episode slots are mid-episode: the env sleeps in each turn
    killed_at = len(seen)
    release.touch()
    restarted: set[int] = set()
    while not batch.done():  # the restarted actor lives until the batch ends (then it is ended too)
        restarted |= ray_actor_pids("EpisodeWorker") - stale - before
        await asyncio.sleep(0.02)
    result = await batch
    assert killed_at <= 16  # the held episodes could not have finished before the kill
    ids = [e.episode_id for e in seen]
    assert sorted(ids) == [f"{i:06d}" for i in range(60)]  # every index, none twice
    assert [e.episode_id for e in result.episodes] == sorted(ids)
    assert [e.seed for e in result.episodes] == list(range(60))
    assert all(e.error is None and len(e.turns) == 3 for e in result.episodes)
    assert restarted, "Ray must have restarted the killed worker"


async def test_a_worker_that_keeps_dying_stops_the_batch_with_a_clear_error(local_ray: None) -> None:
    seen: list[Episode] = []
    killed = ray_actor_pids("EpisodeWorker")  # earlier tests' actors may not have exited yet
    stale = len(killed)
    batch = asyncio.create_task(
        run_batch_ray(
            "testplug/slow",
            "oracle",
            episodes=range(1000),
            seed=0,
            limits=RolloutLimits(concurrency=2),
            env_kwargs={"delay": 0.05},
            on_episode=seen.append,
            workers=1,
        )
    )
    while not batch.done():
        alive = ray_actor_pids("EpisodeWorker") - killed
        for pid in alive:
            os.kill(pid, signal.SIGKILL)
        killed |= alive
        await asyncio.sleep(0.05)
    with pytest.raises(RayWorkerLost, match=r"(?s)died 4 times.*run again with --resume"):
        await batch
    assert len(killed) - stale == ACTOR_RESTARTS + 1
    assert len({e.episode_id for e in seen}) == len(seen) < 1000


def test_cli_ray_runner_writes_the_same_batch_as_the_local_backend(tmp_path: Path) -> None:
    """The real command, which starts (and stops) its own local Ray instance."""
    batches = {}
    for backend in ("local", "ray"):
        out = tmp_path / backend
        command = [
            sys.executable, "-m", "envhub", "rollout", "arithmetic", "--episodes", "10", "--seed", "5",
            "--concurrency", "3", "--backend", backend, "--out", str(out),
        ]  # fmt: skip
        env = {**os.environ, "COLUMNS": "200"}  # no line breaks in the summary line
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"10 episodes in {out}" in done.stdout
        batches[backend] = [content(e) for e in read_episodes(out)]
    assert len(batches["ray"]) == 10
    assert batches["ray"] == batches["local"]


def test_cli_rejects_an_unknown_backend(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "envhub", "rollout", "arithmetic", "--backend", "spark"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "unknown backend 'spark'; expected local, ray, auto or ray://HOST:PORT" in done.stderr


def test_joining_a_cluster_retries_only_ray_client_s_server_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray Client's proxier can lose the server it starts for a client (a zombie under load): that is
    joined again; any other connection error is raised at once."""
    from envhub.rollout import ray_runner

    calls: list[str] = []

    def flaky_init(address: str, **_: object) -> None:
        calls.append(address)
        if len(calls) == 1:
            raise ConnectionAbortedError("Initialization failure from server:\npsutil.ZombieProcess")

    monkeypatch.setattr(ray, "init", flaky_init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr("envhub.rollout.ray_runner.time.sleep", lambda _: None)
    ray_runner.init_ray("ray://127.0.0.1:1")
    assert calls == ["ray://127.0.0.1:1"] * 2

    def refused(address: str, **_: object) -> None:
        raise ConnectionRefusedError("no cluster there")

    monkeypatch.setattr(ray, "init", refused)
    with pytest.raises(ConnectionRefusedError):
        ray_runner.init_ray("ray://127.0.0.1:1")
