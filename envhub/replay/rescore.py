"""Apply today's reward code to a stored batch by replaying each episode (see `envhub.replay.episode`).

The stored batch is never rewritten: `write_rescored` makes a new batch folder whose episodes carry the
new rewards, and only when every episode could be replayed to its end (a diverged episode's reward
cannot be recomputed without its sandboxes, and a batch mixing old and new rewards would mislead).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from envhub.records import Episode
from envhub.replay.episode import NotRecorded, ReplayReport, replay_episode
from envhub.store import BatchStore, load_manifest, read_episodes


def _stored(root: Path) -> tuple[list[Episode], dict[str, object]]:
    manifest = load_manifest(root)
    if manifest is None:
        raise FileNotFoundError(
            f"{root} holds no envhub batch; give a folder written by `envhub rollout --out`"
        )
    return read_episodes(root), dict(manifest.spec.env_kwargs)


def find_episode(root: Path, episode: str) -> tuple[Episode, dict[str, object]]:
    """Episode `episode` (`3` or `000003`) of the batch in `root`, with the batch's env options."""
    episodes, env_kwargs = _stored(root)
    for stored in episodes:
        if stored.episode_id in (episode, episode.zfill(6)):
            return stored, env_kwargs
    span = (
        f"ids run from {episodes[0].episode_id} to {episodes[-1].episode_id}" if episodes else "it is empty"
    )
    raise ValueError(f"no episode {episode!r} in {root}; {span}")


async def rescore(
    root: Path, *, on_episode: Callable[[ReplayReport], None] | None = None
) -> tuple[list[Episode], list[ReplayReport]]:
    """Replay every episode of the batch in `root`: the stored episodes and what each replay found."""
    episodes, env_kwargs = _stored(root)
    unrecorded = [e.episode_id for e in episodes if e.recording is None]
    if unrecorded:
        raise NotRecorded(
            f"{len(unrecorded)} of {len(episodes)} episodes of {root} have no recording (first: "
            f"{unrecorded[0]}); rescoring replays episodes, so roll the batch out with --record"
        )
    reports = []
    for episode in episodes:
        report = await replay_episode(episode, env_kwargs=env_kwargs)
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
    manifest = load_manifest(source)
    assert manifest is not None  # rescore() read it
    with BatchStore.open(out, manifest.spec, episodes=len(episodes), resume=False) as store:
        for episode, report in zip(episodes, reports, strict=True):
            store.add(rescored(episode, report))
    return out
