"""A stopped fork batch resumed with --resume: each group (prefix + children) is stored whole or played
again whole, so the batch ends with every episode once and every child beside its own prefix."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import envhub
from envhub.policies import load_policy
from envhub.records import Episode
from envhub.rollout import RolloutLimits, plan, rollout
from envhub.store import MANIFEST, read_episodes

GUESS_ID = "test-fork-resume-guess-v0"


class Guess(envhub.MultiTurnEnv):
    """Three turns of guessing; the reward is the seed's secret, so each group's rows are its own."""

    max_turns = 3

    def setup(self, rng: random.Random) -> str:
        self.secret = rng.randint(0, 1000)
        return "Guess."

    def respond(self, text: str) -> str:
        return "no"

    @envhub.reward
    def secret_echo(self) -> float:
        return float(self.secret)

    def reference_action(self, messages: list[envhub.Message]) -> str:
        return "1"


class Stop(Exception):
    """Raised from on_episode: the batch stops with some episodes stored, as a kill would leave it."""


def check_whole_groups(episodes: list[Episode], tasks: int, group: int) -> None:
    """Every id once, in order, and every child beside the prefix it was forked from (its turns)."""
    assert [e.episode_id for e in episodes] == [f"{i:06d}" for i in range(tasks * (group + 1))]
    by_id = {e.episode_id: e for e in episodes}
    for child in episodes:
        if child.parent is None:
            continue
        prefix = by_id[child.parent]
        assert prefix.parent is None and child.seed == prefix.seed
        assert child.fork_turn is not None and child.turns[: child.fork_turn] == prefix.turns


async def test_a_group_stopped_part_way_is_played_again_whole_and_stored_once(tmp_path: Path) -> None:
    envhub.register(GUESS_ID, Guess, override=True)
    out, refs, seen = tmp_path / "run", plan(3, rollouts=3), []

    def stop_after_four(episode: Episode) -> None:
        seen.append(episode.episode_id)
        if len(seen) == 4:  # one whole group, then the prefix of the next: a group stored in part
            raise Stop

    oracle = load_policy("oracle")
    stopped = False
    try:
        one_at_a_time = RolloutLimits(concurrency=1)  # no other group is stored after the stop
        await rollout(
            GUESS_ID,
            oracle,
            episodes=refs,
            fork_at=1,
            out=out,
            on_episode=stop_after_four,
            limits=one_at_a_time,
        )
    except* Stop:  # raised in a group's worker task
        stopped = True
    assert stopped
    before = {e.episode_id: e for e in read_episodes(out)}
    assert len(before) == 4
    result = await rollout(GUESS_ID, oracle, episodes=refs, fork_at=1, out=out, resume=True)
    check_whole_groups(result.episodes, tasks=3, group=2)
    assert result.played == 6  # the part-stored group again whole, and the one never started
    whole = {i for i in before if before[i].parent == seen[0] or i == seen[0]}
    assert len(whole) == 3 and all(before[i] == e for e in result.episodes if (i := e.episode_id) in whole)


def test_kill_9_mid_fork_batch_then_resume_stores_every_group_once(plugin_site: Path, tmp_path: Path) -> None:
    """The real CLI, SIGKILLed once three groups are stored (the later ones wait for a release file),
    then resumed: 18 episodes, each once, each child with its parent."""
    out, release = tmp_path / "batch", tmp_path / "release"

    def cli(*extra: str) -> subprocess.Popen[str]:
        command = [
            sys.executable, "-m", "envhub", "rollout", "testplug/slow", "--kwarg", "delay=0.01",
            "--kwarg", "hold_from=3", "--kwarg", f"release={release}", "--episodes", "6",
            "--fork-at", "1", "--group", "2", "--concurrency", "2", "--out", str(out), *extra,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(plugin_site), "COLUMNS": "120"}
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    first = cli()
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, not a guess
        while not (out / MANIFEST).exists() or len(read_episodes(out)) < 9:
            assert first.poll() is None, f"the rollout ended early: {first.communicate()[0]}"
            assert time.monotonic() < deadline, "three groups were not stored in 120 s"
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    survivors = {e.episode_id: e for e in read_episodes(out)}
    assert len(survivors) == 9
    release.touch()
    resumed = cli("--resume")
    output, _ = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, output
    episodes = read_episodes(out)
    check_whole_groups(episodes, tasks=6, group=2)
    assert all(survivors[e.episode_id] == e for e in episodes if e.episode_id in survivors)
    assert "this run: 9" in output


class Flaky(Guess):
    """`Guess` whose first continuation past the fork fails once, as a crashed sandbox would."""

    failures_left = 0

    def respond(self, text: str) -> str:
        if self.turn == 2 and Flaky.failures_left:
            Flaky.failures_left -= 1
            raise envhub.InfrastructureError("the sandbox died")
        return "no"


async def test_retry_errors_plays_a_failed_childs_group_again_whole_and_once(tmp_path: Path) -> None:
    flaky_id = "test-fork-resume-flaky-v0"
    envhub.register(flaky_id, Flaky, override=True)
    out, refs, oracle = tmp_path / "run", plan(3, rollouts=3), load_policy("oracle")
    no_reruns = RolloutLimits(concurrency=1, retries=0)  # the error is stored, not retried on the spot
    Flaky.failures_left = 1
    first = await rollout(flaky_id, oracle, episodes=refs, fork_at=1, out=out, limits=no_reruns)
    failed = [e for e in first.episodes if e.error is not None]
    assert len(failed) == 1 and failed[0].parent is not None  # a child, after its group's prefix
    group = {e.episode_id for e in first.episodes if failed[0].parent in (e.episode_id, e.parent)}
    before = {e.episode_id: e for e in first.episodes}

    result = await rollout(
        flaky_id, oracle, episodes=refs, fork_at=1, out=out, limits=no_reruns, resume=True, retry_errors=True
    )
    check_whole_groups(result.episodes, tasks=3, group=2)
    assert all(e.error is None for e in result.episodes)
    assert result.retried == [int(failed[0].episode_id)]
    assert result.played == len(group) == 3  # the failed child's whole group, and no other episode
    assert all(before[i] == e for e in result.episodes if (i := e.episode_id) not in group)
