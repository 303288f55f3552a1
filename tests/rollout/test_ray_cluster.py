"""The Ray backend on a real multi-node cluster on this host (three raylets, `tests.envhub_testkit.
ray_cluster`): episodes placed by resource and recording their node, env actors reused and episodes
returned several per call, the trainer's engine and env actors on different nodes, and a whole node
killed mid-batch without losing or doubling an episode.

Nodes: `head` (the driver's, with `gpu-like` for the engines), `a` (`sandbox` x4 and `browser`), `b`
(`sandbox` x2). The module starts the cluster once; the node-kill test runs last, as it ends node b.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.policies import load_policy
from envhub.records import Episode
from envhub.rollout import RayEpisodePool, RolloutLimits, plan, rollout
from envhub.store import read_episodes
from tests.envhub_testkit.leaks import reap_adopted_zombies
from tests.envhub_testkit.processes import ray_actor_pids
from tests.envhub_testkit.ray_cluster import NodeSpec, RayCluster, ray_cluster

ray = pytest.importorskip("ray", reason="the Ray backend needs Ray: pip install 'envhub-core[ray]'")


@pytest.fixture(autouse=True)
def _reap_the_killed_nodes_sandboxes() -> Iterator[None]:
    """A node these tests kill leaves its sandboxes' dead inits to this process (a subreaper): reap them,
    or the next sandbox test's leak check sees them vanish."""
    yield
    reap_adopted_zombies()


pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HEAD = NodeSpec("head", cpus=1, resources={"gpu-like": 1})
WORKERS = [
    NodeSpec("a", cpus=2, resources={"sandbox": 4, "browser": 1}),
    NodeSpec("b", cpus=2, resources={"sandbox": 2}),
]
SANDBOXED = "code-single"
"""A real sandboxed env (its default sandbox is `local`): its actors ask for `sandbox`."""
ORACLE = functools.partial(load_policy, "oracle")


class Alnum(envhub.SingleTurnEnv):
    """The trainer's test env: the share of the reply that is letters or digits (it varies: steps train)."""

    def setup(self, rng: random.Random) -> str:
        return f"Say a number like {rng.randint(0, 99)}."

    @envhub.reward
    def alnum(self, answer: str) -> float:
        return sum(c.isascii() and c.isalnum() for c in answer) / max(len(answer), 1)


envhub.register("alnum-cluster-test-v0", Alnum, override=True)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with ray_cluster(HEAD, WORKERS, pythonpath=[str(ROOT)]) as running:
        yield running


def played(episodes: list[Episode]) -> list[tuple[Any, ...]]:
    """What an episode played, not where or when: id, seed, reward, error and every message."""
    return [(e.episode_id, e.seed, e.reward, e.error, [m.model_dump() for m in e.messages]) for e in episodes]


def test_cli_rollout_spreads_sandboxed_episodes_over_the_sandbox_nodes(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """`envhub rollout --backend ray://HOST:PORT` (the cluster's Ray Client): episodes only on the nodes
    that have the `sandbox` resource (never the head, which has none), on both of them, each recording
    its node."""
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "envhub", "rollout", SANDBOXED, "--episodes", "8", "--seed", "7",
        "--concurrency", "4", "--backend", cluster.client_address, "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    episodes = read_episodes(out)
    ids = cluster.node_ids()
    assert sorted(e.episode_id for e in episodes) == [f"{i:06d}" for i in range(8)]
    assert all(e.reward == 1.0 and e.error is None for e in episodes)
    assert {e.node for e in episodes} == {ids["a"], ids["b"]}


async def test_browser_episodes_run_only_on_the_browser_node(cluster: RayCluster) -> None:
    with RayEpisodePool() as pool:
        result = await rollout(
            "web-tasks", ORACLE, episodes=plan(2, seed=3), limits=RolloutLimits(concurrency=2), runs_on=pool
        )
        [actor] = pool.stats()  # one unit of `browser` in the cluster: one actor
    assert [e.reward for e in result.episodes] == [1.0, 1.0]
    assert {e.node for e in result.episodes} == {cluster.node_ids()["a"]}
    assert actor["node"] == cluster.node_ids()["a"] and actor["episodes"] == 2


async def test_env_actors_are_reused_across_episodes_and_return_them_several_per_call(
    cluster: RayCluster,
) -> None:
    limits = RolloutLimits(concurrency=8)
    with RayEpisodePool() as pool:
        for seed in (0, 100):
            result = await rollout(
                SANDBOXED, ORACLE, episodes=plan(16, seed=seed), limits=limits, runs_on=pool, ray_workers=4
            )
            assert len(result.episodes) == 16 and all(e.reward == 1.0 for e in result.episodes)
        actors = pool.stats()
        pids = ray_actor_pids("EpisodeWorker")
        nodes = {cluster.node_of(a["pid"]) for a in actors}  # by the processes, not by what Ray says
    ids = cluster.node_ids()
    assert len(actors) == 4 and len({a["pid"] for a in actors}) == 4 and {a["pid"] for a in actors} <= pids
    assert {a["node"] for a in actors} == {ids["a"], ids["b"]}
    assert sum(a["episodes"] for a in actors) == 32
    assert all(a["envs"] <= 2 for a in actors)  # 2 episodes at a time per actor: 2 envs, reset 8 times
    assert sum(a["calls"] for a in actors) < 32  # several episodes come back per call
    assert nodes == {"a", "b"}


def test_trainer_runs_engines_and_env_actors_on_different_nodes(cluster: RayCluster, tmp_path: Path) -> None:
    """One tiny GRPO step with `ray: true` on the cluster: the engine actor asks for `gpu-like` (only the
    head has it), the env actors for `sandbox` (a and b); the actors' processes say where they ran."""
    from envhub_trainer.config import TrainConfig
    from envhub_trainer.grpo import train

    from envhub.testing.tiny_model import tiny_chat_model

    model = tiny_chat_model(tmp_path / "model", vocab_size=300, hidden_size=64)
    run = TrainConfig.model_validate(
        {
            "model": model, "env_id": "alnum-cluster-test-v0", "run_dir": tmp_path / "run", "steps": 1,
            "tasks_per_step": 2, "group_size": 2, "concurrency": 2, "max_new_tokens": 4,
            "checkpoint_every": 0, "tensorboard": False, "ray": True, "env_workers": 2,
            "ray_engine_resources": {"gpu-like": 1}, "ray_env_resources": {"sandbox": 1},
        }
    )  # fmt: skip
    seen: dict[str, set[str]] = {"RolloutWorker": set(), "EpisodeWorker": set()}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            for kind, nodes in seen.items():
                for pid in ray_actor_pids(kind):
                    try:
                        nodes.add(cluster.node_of(pid))
                    except (OSError, ValueError):  # gone while we looked
                        continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        rows = train(run)
    finally:
        stop.set()
        watcher.join()
    assert rows[0]["samples"] == 4 and rows[0]["episode_errors"] == 0
    ids = cluster.node_ids()
    stored = read_episodes(tmp_path / "run" / "episodes" / "step-0001")
    assert len(stored) == 4 and {e.node for e in stored} <= {ids["a"], ids["b"]}
    assert seen["RolloutWorker"] == {"head"}
    assert seen["EpisodeWorker"] and seen["EpisodeWorker"] <= {"a", "b"}


async def test_a_node_killed_mid_batch_loses_no_episode_and_runs_none_twice(cluster: RayCluster) -> None:
    """Node b's whole process group (raylet, workers, agents) is SIGKILLed while its actors play: Ray
    restarts them on node a, which re-runs their episodes; the batch is the local run's, each episode
    once. Runs last: node b stays dead."""
    ids = cluster.node_ids()
    seen: list[Episode] = []
    b_played = asyncio.Event()

    def record(episode: Episode) -> None:
        seen.append(episode)
        if episode.node == ids["b"] and len(seen) >= 4:
            b_played.set()

    episodes, limits = plan(24, seed=11), RolloutLimits(concurrency=8)
    with RayEpisodePool() as pool:
        batch = asyncio.create_task(
            rollout(
                SANDBOXED,
                ORACLE,
                episodes=episodes,
                limits=limits,
                runs_on=pool,
                ray_workers=4,
                on_episode=record,
            )
        )
        await asyncio.wait_for(b_played.wait(), timeout=180)
        killed_at = len(seen)
        cluster.kill("b")
        result = await asyncio.wait_for(batch, timeout=300)
    local = await rollout(SANDBOXED, ORACLE, episodes=episodes, limits=limits)
    assert killed_at < 24, "node b must die mid-batch"
    assert sorted(e.episode_id for e in seen) == [f"{i:06d}" for i in range(24)]  # each once
    assert played(result.episodes) == played(local.episodes)
    assert all(e.reward == 1.0 for e in result.episodes)
    assert {e.node for e in result.episodes} == {ids["a"], ids["b"]}
    assert "b" not in cluster.node_ids()
