"""Apply today's reward code to a stored batch by replaying each episode (see `envhub.record.replay`).

A rescore re-scores the *recorded* grader outputs: every command and grade comes from the recording,
so it is only as good as the recording, and every episode's seal is checked before any is replayed
(`envhub.record.seal`). `regrade` trusts nothing recorded but the actions: it plays them again on a fresh
env, in real sandboxes, and grades afresh (`envhub.record.regrade`).

The stored batch is never rewritten: `write_rescored` makes a new batch folder whose episodes carry the
new rewards (sealed again), and only when every episode could be replayed to its end (a diverged
episode's reward cannot be recomputed without its sandboxes, and a batch mixing old and new rewards would
mislead).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from envhub.record import seal
from envhub.record.replay import NotRecorded, ReplayReport, replay_episode
from envhub.records import Episode
from envhub.store import BatchStore, load_manifest, read_episodes


def stored(root: Path) -> tuple[list[Episode], dict[str, object]]:
    """The episodes of the batch in `root`, and the env options it was rolled out with."""
    manifest = load_manifest(root)
    if manifest is None:
        raise FileNotFoundError(
            f"{root} holds no envhub batch; give a folder written by `envhub rollout --out`"
        )
    return read_episodes(root), dict(manifest.spec.env_kwargs)


def find_episode(root: Path, episode: str) -> tuple[Episode, dict[str, object]]:
    """Episode `episode` (`3` or `000003`) of the batch in `root`, with the batch's env options."""
    seal.check_apart(root)
    episodes, env_kwargs = stored(root)
    for found in episodes:
        if found.episode_id in (episode, episode.zfill(6)):
            return found, env_kwargs
    span = (
        f"ids run from {episodes[0].episode_id} to {episodes[-1].episode_id}" if episodes else "it is empty"
    )
    raise ValueError(f"no episode {episode!r} in {root}; {span}")


async def rescore(
    root: Path, *, on_episode: Callable[[ReplayReport], None] | None = None
) -> tuple[list[Episode], list[ReplayReport]]:
    """Replay every episode of the batch in `root`: the stored episodes and what each replay found.

    Every episode's seal is checked first: one that fails stops the rescore before anything is replayed.
    """
    seal.check_apart(root)
    episodes, env_kwargs = stored(root)
    unrecorded = [e.episode_id for e in episodes if e.recording is None]
    if unrecorded:
        raise NotRecorded(
            f"{len(unrecorded)} of {len(episodes)} episodes of {root} have no recording (first: "
            f"{unrecorded[0]}); rescoring replays episodes, so roll the batch out with --record, or "
            f"grade their actions afresh with `envhub rescore {root} --regrade`"
        )
    key = seal.load_key(create=False)
    refused = []
    for episode in episodes:
        try:
            seal.verify(episode, env_kwargs, key, where=str(root))
        except seal.UnsealedRecording as exc:
            refused.append((episode.episode_id, exc))
    if refused:
        first = refused[0][1]
        others = "" if len(refused) == 1 else f" ({len(refused)} episodes refused: {_ids(refused)})"
        raise seal.UnsealedRecording(f"{first}{others}")
    reports = []
    for episode in episodes:
        report = await replay_episode(episode, env_kwargs=env_kwargs, key=key, where=str(root))
        reports.append(report)
        if on_episode is not None:
            on_episode(report)
    return episodes, reports


def rescored(episode: Episode, report: ReplayReport) -> Episode:
    """The episode with the rewards its replay gave: per turn, in total and by component."""
    assert report.reward is not None, "only an episode replayed to its end has a new reward"
    turns = [
        turn.model_copy(
            update={
                "reward": reward,
                "info": {**turn.info, "reward_components": report.reward_components}
                if "reward_components" in turn.info
                else turn.info,
            }
        )
        for turn, reward in zip(episode.turns, report.turn_rewards, strict=True)
    ]
    return episode.model_copy(
        update={"turns": turns, "reward": report.reward, "reward_components": report.reward_components}
    )


def write_rescored(source: Path, out: Path, episodes: list[Episode], reports: list[ReplayReport]) -> Path:
    """A new batch folder `out` holding the batch of `source` with its new rewards."""
    if out.resolve() == source.resolve():
        raise ValueError(
            f"--out {out} is the batch being rescored; a rescore never rewrites it: choose a new folder"
        )
    diverged = [r.episode_id for r in reports if r.reward is None]
    if diverged:
        raise ValueError(
            f"{len(diverged)} episodes diverged (first: {diverged[0]}), so their rewards cannot be "
            "recomputed without sandboxes; nothing was written (play them again with a sandbox instead)"
        )
    seal.check_apart(out)
    manifest = load_manifest(source)
    assert manifest is not None  # rescore() read it
    key = seal.load_key(create=False)
    env_kwargs = dict(manifest.spec.env_kwargs)
    with BatchStore.open(out, manifest.spec, episodes=len(episodes), resume=False) as store:
        for episode, report in zip(episodes, reports, strict=True):
            store.add(seal.seal(rescored(episode, report), env_kwargs, key))
    return out


def _ids(refused: list[tuple[str, seal.UnsealedRecording]]) -> str:
    shown = ", ".join(i for i, _ in refused[:8])
    return shown + (", ..." if len(refused) > 8 else "")
