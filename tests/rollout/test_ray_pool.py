"""`RayEpisodePool`: episode actors, their envs and their policies kept from one `rollout()` call to the
next (the trainer calls it once per step), a new policy factory honoured, a restarted actor replaced
between batches; and remote ids (`ws://host:port/ID` of `envhub serve`) played from the actors.

The env and the policy of these tests live in this module, which the actors could not import by name
(pytest puts tests/ on the driver's path only): it is pickled by value, and the backend sends the
driver's registration of the env to its actors.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import re
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.core import Action
from envhub.messages import Message
from envhub.policies import Policy, load_policy
from envhub.records import Episode
from envhub.rollout import RayEpisodePool, RolloutLimits, plan, rollout
from envhub.rollout.ray_runner import KEPT
from envhub.store import read_episodes
from envhub.tools import ToolSpec
from tests.envhub_testkit.processes import ray_actor_pids
from tests.serve.test_serve import TOKEN, Server, metrics

ray = pytest.importorskip("ray", reason="the Ray backend needs Ray: pip install 'envhub-core[ray]'")

pytestmark = pytest.mark.slow

ENV = "ray-pool-test/repeat-v0"


def note(log: str, what: str) -> None:
    """One line `WHAT PID` in the file `log`: what happened in which process."""
    with Path(log).open("a") as f:
        f.write(f"{what} {os.getpid()}\n")


def events(log: Path, what: str) -> list[int]:
    """The processes in which `what` happened, one entry per time."""
    lines = log.read_text().split("\n") if log.exists() else []
    return [int(line.split()[1]) for line in lines if line.startswith(f"{what} ")]


def closed_policies(log: Path) -> list[str]:
    """The policies closed so far, in order, by what they add to the number."""
    return [
        line.split()[0].removeprefix("closed-policy")
        for line in log.read_text().splitlines()
        if line.startswith("closed-policy")
    ]


class Repeat(envhub.SingleTurnEnv):
    """Asks the agent to repeat a number. Notes in `log` each env made and closed and each episode's
    process; episodes from seed `hold_from` on wait in their reward until the file `release` exists."""

    def __init__(self, *, log: str, hold_from: int | None = None, release: str = "") -> None:
        super().__init__()
        self.log, self.hold_from, self.release = log, hold_from, release
        note(log, "made")

    def setup(self, rng: random.Random) -> str:
        self.number = rng.randint(0, 999)
        note(self.log, "episode")
        return f"Repeat {self.number}."

    @envhub.reward
    async def repeated(self, answer: str) -> float:
        if self.hold_from is not None and self.seed is not None and self.seed >= self.hold_from:
            while not self._released():  # noqa: ASYNC110 - the test releases it through a file
                await asyncio.sleep(0.02)
        return float(answer.strip() == str(self.number))

    def _released(self) -> bool:
        return os.path.exists(self.release)

    async def close(self) -> None:
        note(self.log, "closed")
        await super().close()


class Repeater(Policy):
    """Answers the last number it was shown plus `offset` (0: always right); notes its close in `log`."""

    def __init__(self, offset: int, log: str) -> None:
        self.offset, self.log = offset, log
        self.name = f"repeater+{offset}"

    async def close(self) -> None:
        note(self.log, f"closed-policy+{self.offset}")

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        return str(int(re.findall(r"\d+", str(messages[-1].content))[-1]) + self.offset)


@dataclass(frozen=True)
class BuildRepeater:
    """A picklable policy factory that notes in `log` each policy it builds; equal when its fields are."""

    log: str
    offset: int = 0

    def __call__(self) -> Policy:
        note(self.log, "policy")
        return Repeater(self.offset, self.log)


envhub.register(ENV, Repeat, override=True)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def local_ray(plugin_site: Path) -> Iterator[None]:
    """One local Ray instance for the module, started before any test sets a serve token."""
    ray.init(
        num_cpus=2,
        address="local",
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(plugin_site)}},
    )
    yield
    ray.shutdown()


def played(episodes: list[Episode]) -> list[tuple[Any, ...]]:
    """What an episode played, not where or when: seed, reward, policy and every message."""
    return [(e.seed, e.reward, e.policy, e.error, [m.model_dump() for m in e.messages]) for e in episodes]


async def test_a_pool_keeps_its_actors_envs_and_policies_across_batches(
    local_ray: None, tmp_path: Path
) -> None:
    log, local_log = str(tmp_path / "log"), str(tmp_path / "local-log")
    limits = RolloutLimits(concurrency=2)
    stale = ray_actor_pids("EpisodeWorker")  # an earlier test's actors may not have exited yet
    with RayEpisodePool() as pool:
        batches = [
            await rollout(
                ENV,
                BuildRepeater(log),
                episodes=plan(6, seed=seed),
                limits=limits,
                env_kwargs={"log": log},
                runs_on=pool,
                ray_workers=2,
            )
            for seed in (0, 100)  # a new but equal factory each call, as the trainer's engine hands out
        ]
        actors = ray_actor_pids("EpisodeWorker") - stale
        wrong = await rollout(
            ENV, BuildRepeater(log, offset=1), episodes=plan(4, seed=0), limits=limits,
            env_kwargs={"log": log}, runs_on=pool, ray_workers=2,
        )  # fmt: skip
        made_before_close = len(events(Path(log), "made"))
    locally = [
        await rollout(
            ENV, BuildRepeater(local_log), episodes=plan(6, seed=seed), env_kwargs={"log": local_log}
        )
        for seed in (0, 100)
    ]
    assert [played(b.episodes) for b in batches] == [played(b.episodes) for b in locally]
    assert all(e.reward == 1.0 for b in batches for e in b.episodes)
    assert len(actors) == 2 and os.getpid() not in actors
    assert set(events(Path(log), "episode")) == actors  # every episode of every batch on those two actors
    assert Counter(events(Path(log), "made")) == dict.fromkeys(actors, 1)  # one env each, reset 16 times
    assert made_before_close == 2
    assert Counter(events(Path(log), "policy")) == dict.fromkeys(actors, 2)  # one per factory: no more
    assert [e.policy for e in wrong.episodes] == ["repeater+1"] * 4  # a new factory is a new policy
    assert all(e.reward == 0.0 for e in wrong.episodes)
    assert sorted(events(Path(log), "closed")) == sorted(events(Path(log), "made"))  # close() closed them


async def test_an_actor_keeps_its_latest_policies_and_closes_older_idle_ones(
    local_ray: None, tmp_path: Path
) -> None:
    """A long-lived pool given a new factory per batch does not pile up policies: beyond `KEPT`, the
    least recently used is closed, and built again if its factory comes back."""
    log = str(tmp_path / "log")
    with RayEpisodePool() as pool:
        for offset in [*range(KEPT + 1), 0]:
            await rollout(
                ENV,
                BuildRepeater(log, offset),
                episodes=2,
                limits=RolloutLimits(concurrency=1),
                env_kwargs={"log": log},
                runs_on=pool,
                ray_workers=1,
            )
        closed_before_close = closed_policies(Path(log))
    assert len(events(Path(log), "policy")) == KEPT + 2  # the first factory's policy was built twice
    assert closed_before_close == ["+0", "+1"]
    assert len(events(Path(log), "made")) == 1  # one env, whatever the policy
    assert sorted(closed_policies(Path(log))[2:]) == ["+0", "+2", "+3", "+4"]  # the rest at close()


async def test_an_actor_ray_restarted_is_replaced_before_the_next_batch(
    local_ray: None, tmp_path: Path
) -> None:
    """A killed actor is restarted and its in-flight episodes re-run (each stored once); after that
    batch the pool ends the restarted actor, so the next batch has Ray's every restart again, and the
    pool goes on playing."""
    log, release = str(tmp_path / "log"), tmp_path / "release"
    kwargs = {"log": log, "hold_from": 4, "release": str(release)}
    seen: list[Episode] = []
    midway = asyncio.Event()

    def record(episode: Episode) -> None:
        seen.append(episode)
        if len(seen) == 4:
            midway.set()

    stale = ray_actor_pids("EpisodeWorker")
    with RayEpisodePool() as pool:

        async def batch(seed: int, on_episode: Any = None) -> list[Episode]:
            result = await rollout(
                ENV,
                BuildRepeater(log),
                episodes=plan(12, seed=seed),
                limits=RolloutLimits(concurrency=4),
                env_kwargs=kwargs,
                runs_on=pool,
                ray_workers=2,
                on_episode=on_episode,
            )
            return result.episodes

        running = asyncio.create_task(batch(0, record))
        await asyncio.wait_for(midway.wait(), timeout=120)  # seeds 0-3 done, 4-7 held on both actors
        survivor, victim = sorted(ray_actor_pids("EpisodeWorker") - stale)
        os.kill(victim, signal.SIGKILL)
        release.touch()
        first_episodes = await running
        played_before = len(events(Path(log), "episode"))
        second_episodes = await batch(1000)
    assert sorted(e.episode_id for e in seen) == [f"{i:06d}" for i in range(12)]  # each index once
    assert all(e.error is None and e.reward == 1.0 for e in first_episodes + second_episodes)
    first = set(events(Path(log), "episode")[:played_before])
    second = set(events(Path(log), "episode")[played_before:])
    assert len(first) == 3 and {survivor, victim} < first  # the victim's episodes re-ran on its restart
    assert len(second) == 2 and second & first == {survivor}, "the restarted actor must be replaced"


async def test_a_remote_id_plays_on_the_ray_runner_as_it_does_locally(
    local_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ws://host:port/ID` unchanged, on Ray actors: the same stored episodes as the local backend, the
    server's token reaching the actors although it was set after Ray started (so they did not inherit it)."""
    server = Server("--token", TOKEN)
    monkeypatch.setenv("ENVHUB_SERVE_TOKEN", TOKEN)
    url = f"{server.base}/guess-number"
    oracle = functools.partial(load_policy, "oracle")
    options: dict[str, Any] = {
        "episodes": 6,
        "env_kwargs": {"high": 50},
        "limits": RolloutLimits(concurrency=3),
    }
    try:
        local = await rollout(url, oracle, out=tmp_path / "local", runs_on="local", **options)
        remote = await rollout(url, oracle, out=tmp_path / "ray", runs_on="ray", **options)
        with RayEpisodePool() as pool:
            pooled = [await rollout(url, oracle, runs_on=pool, **options) for _ in range(2)]
        served = metrics(server)
    finally:
        server.stop()
    assert local.env_id == remote.env_id == f"{server.base}/guess-number-v0"
    stored = {run: read_episodes(tmp_path / run) for run in ("local", "ray")}
    assert played(stored["ray"]) == played(stored["local"])
    assert all(e.reward == 1.0 and e.env_id == local.env_id for e in stored["ray"])
    assert [played(p.episodes) for p in pooled] == [played(stored["local"])] * 2
    assert served["episodes"] == 6 * 4  # every episode really played on the server
