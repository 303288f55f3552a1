"""`rollout()`: one batch of episodes, stored, resumable and safe to interrupt, for every caller.

The command line and the trainer both play their episodes through it, so both get the runner's limits
and retries, the same store layout and the same resume. Episodes are given as references (index,
seed, rollout), so a GRPO group is G references to one task.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from envhub.policies import Policy
from envhub.record import seal
from envhub.records import RETRYABLE, Episode, episode_id
from envhub.registration import registry
from envhub.rollout.gc_policy import batch_gc
from envhub.rollout.kwargs import check_env_kwargs
from envhub.rollout.ray_runner import PolicyFactory, RayEpisodePool, ray_address, run_batch_ray
from envhub.rollout.runner import BatchResult, EpisodeRef, RolloutLimits, plan, run_batch
from envhub.store import BatchSpec, BatchStore, read_episodes

RUNS = Path("runs")
"""Where a batch goes when no output folder is given."""


class RolloutResult(BaseModel):
    """What a `rollout()` call did, and the whole batch it belongs to."""

    model_config = ConfigDict(frozen=True)

    env_id: str
    """The resolved id every backend played (`arithmetic` → `arithmetic-v0`)."""
    out: Path | None
    episodes: list[Episode]
    """Every episode of the batch in episode order: the stored ones too, when it was resumed."""
    played: int
    """Episodes this call played."""
    retried: list[int]
    """Indices of the episodes that had ended in error and this call played again (`retry_errors`)."""
    not_started: list[int]
    """Indices the time budget left unplayed: a resume plays them."""
    wall_seconds: float
    """This call's wall time."""


def failed(episode: Episode) -> bool:
    """The machinery failed the episode (after every retry); a cutoff by a time limit is not a failure."""
    return episode.error is not None and episode.error.kind in RETRYABLE


def error_rate_problem(episodes: Sequence[Episode], max_error_rate: float) -> str | None:
    """One line saying why the batch failed when more than `max_error_rate` of its episodes did, else None."""
    failures = [e for e in episodes if failed(e)]
    if not episodes or len(failures) / len(episodes) <= max_error_rate:
        return None
    kinds = ", ".join(
        f"{kind}: {n}" for kind, n in Counter(e.error.kind for e in failures if e.error).items()
    )
    common, _ = Counter(e.error.message for e in failures if e.error).most_common(1)[0]
    first_line = common.strip().splitlines()[0] if common.strip() else common
    return (
        f"{len(failures)} of {len(episodes)} episodes failed ({kinds}), more than --max-error-rate "
        f"{max_error_rate:g}; most common: {first_line}"
    )


def fresh_run_dir(env_id: str, root: Path = RUNS) -> Path:
    """A new folder under `root` named after the env and the time, never one that exists."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    base = root / f"{env_id.replace('/', '_')}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


RunsOn = str | RayEpisodePool
"""Where a batch's episodes run: "local" (asyncio in this process), a Ray address (`ray`, `auto`,
`ray://HOST:PORT`: actors for one call) or a `RayEpisodePool` whose actors outlive the call. The command
line's `--backend` flag (kept for its users) takes the strings; in the Python API a `backend` is a
sandbox's kind (the env option `backend=docker`, `RolloutLimits.backend_concurrency`)."""


async def rollout(
    env_id: str,
    policy: Policy | PolicyFactory,
    *,
    episodes: int | Sequence[EpisodeRef],
    limits: RolloutLimits | None = None,
    env_kwargs: dict[str, Any] | None = None,
    seed: int | None = 0,
    out: Path | None = None,
    resume: bool = False,
    retry_errors: bool = False,
    shard_size: int = 256,
    runs_on: RunsOn = "local",
    ray_workers: int | None = None,
    policy_label: str | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    fork_at: int | None = None,
) -> RolloutResult:
    """Play a batch of `env_id` with `policy`; with `out`, store it there (journal, shards, manifest).

    `episodes` is a count (episode i plays seed `seed + i`) or references from `plan()`. `policy` is
    a live policy (the caller closes it) or a factory (built and closed here; the only kind Ray takes,
    since it must pickle). `limits` are the runner's (`RolloutLimits`). `resume` completes the batch in
    `out`, and `retry_errors` also plays again the episodes that ended in error there (cut-offs by a
    time limit included). `policy_label` names the policy in the manifest (a resume must repeat it);
    `on_start(total, stored)` is called once the options passed their checks and the store is open.
    `runs_on` says where the episodes run (`RunsOn`); `ray_workers` is the number of Ray actors
    (default: one per CPU of the cluster, at most `limits.concurrency`).
    Interrupted (Ctrl-C, cancelled), it keeps every finished episode in `out` and re-raises.
    `fork_at` plays each task's references as a fork group (`run_batch(fork_at=)`): the first is a
    prefix of `fork_at` turns, the others children forked there (on Ray, one group per actor call). A
    resumed fork batch skips the groups stored whole and plays the others again whole, dropping their
    stored rows first.
    """
    limits = limits or RolloutLimits()
    env_kwargs = dict(env_kwargs or {})
    resolved = registry.spec(env_id).id  # every backend plays this version, whatever a worker resolves
    refs = plan(episodes, seed=seed) if isinstance(episodes, int) else list(episodes)
    address = _check_options(resolved, policy, limits, env_kwargs, runs_on, out, resume, retry_errors)
    store = None
    if out is not None:
        _check_batch_refs(refs)
        label = policy_label or (policy.name if isinstance(policy, Policy) else "policy")
        spec = BatchSpec(env_id=resolved, env_kwargs=env_kwargs, policy=label, seed=seed)
        store = BatchStore.open(out, spec, episodes=len(refs), resume=resume, shard_size=shard_size)
    try:
        retried, todo = _still_to_play(refs, store, retry_errors, fork_at)
        if on_start is not None:
            on_start(len(refs), len(refs) - len(todo))
        with batch_gc():  # rare full collections while thousands of episodes are alive (gc_policy.py)
            result = await _play(
                resolved, policy, todo, limits, env_kwargs, _recorder(store, on_episode), runs_on, address,
                ray_workers, fork_at,
            )  # fmt: skip
    finally:
        if store is not None:
            store.close()  # also when interrupted: what finished is compacted and the manifest says so
    return RolloutResult(
        env_id=resolved,
        out=out,
        episodes=read_episodes(out) if out is not None else result.episodes,
        played=len(result.episodes),
        retried=retried,
        not_started=result.not_started,
        wall_seconds=result.wall_seconds,
    )


def _check_options(
    env_id: str,
    policy: Policy | PolicyFactory,
    limits: RolloutLimits,
    env_kwargs: dict[str, Any],
    runs_on: RunsOn,
    out: Path | None,
    resume: bool,
    retry_errors: bool,
) -> str | None:
    """Refuse a batch that cannot run, before anything is stored; returns the Ray address `runs_on`
    names (None: local, a pool, or a local Ray instance)."""
    address = None if runs_on == "local" or isinstance(runs_on, RayEpisodePool) else ray_address(runs_on)
    if runs_on != "local" and isinstance(policy, Policy):
        raise TypeError(
            "the Ray backend builds the policy on each worker: pass a picklable factory, "
            "e.g. functools.partial(envhub.policies.load_policy, 'oracle')"
        )
    if retry_errors and not (resume and out is not None):
        raise ValueError(
            "--retry-errors plays failed episodes of a stored batch again: it needs --out and --resume"
        )
    check_env_kwargs(env_id, env_kwargs)
    if limits.record:
        seal.load_key()  # made, or its problem said, before any episode runs
        if out is not None:
            seal.check_apart(out)
    return address


def _still_to_play(
    refs: list[EpisodeRef], store: BatchStore | None, retry_errors: bool, fork_at: int | None
) -> tuple[list[int], list[EpisodeRef]]:
    """The indices a retry forgot, and the references this call plays: those the store lacks."""
    if store is None:
        return [], refs
    retried = store.forget_errors() if retry_errors else []
    if fork_at is not None:
        store.forget(partial_groups(refs, store.done))  # a group is stored whole or played again whole
    return retried, [refs[i] for i in store.remaining()]


def _recorder(
    store: BatchStore | None, on_episode: Callable[[Episode], None] | None
) -> Callable[[Episode], None]:
    """What each finished episode goes to: the store, then the caller."""

    def record(episode: Episode) -> None:
        if store is not None:
            store.add(episode)
        if on_episode is not None:
            on_episode(episode)

    return record


def partial_groups(refs: Sequence[EpisodeRef], done: set[str]) -> list[str]:
    """The stored ids of fork groups (a task's references) that are stored only in part.

    A child is forked from its prefix's live env, so a group cannot be finished from its stored rows:
    a resume plays it again whole (prefix and children), and these rows must go first, or the batch
    would hold two prefixes' children under one parent id.
    """
    groups: dict[int, list[str]] = {}
    for ref in refs:
        groups.setdefault(ref.task, []).append(episode_id(ref.index))
    return [
        i for ids in groups.values() if 0 < len(done.intersection(ids)) < len(ids) for i in ids if i in done
    ]


def _check_batch_refs(refs: list[EpisodeRef]) -> None:
    """A stored batch names its episodes 0..n-1 in order: that is what resume counts on."""
    if [r.index for r in refs] != list(range(len(refs))):
        raise ValueError("a stored batch needs references with indices 0, 1, ..., n-1 in order (see plan())")


async def _play(
    env_id: str,
    policy: Policy | PolicyFactory,
    refs: list[EpisodeRef],
    limits: RolloutLimits,
    env_kwargs: dict[str, Any],
    record: Callable[[Episode], None],
    runs_on: RunsOn,
    address: str | None,
    ray_workers: int | None = None,
    fork_at: int | None = None,
) -> BatchResult:
    if not refs:
        return BatchResult(episodes=[], wall_seconds=0.0)
    if runs_on != "local":
        assert not isinstance(policy, Policy)  # rollout() refused that above
        return await run_batch_ray(
            env_id,
            policy,
            episodes=refs,
            seed=None,
            limits=limits,
            env_kwargs=env_kwargs,
            on_episode=record,
            address=address,
            workers=ray_workers,
            pool=runs_on if isinstance(runs_on, RayEpisodePool) else None,
            fork_at=fork_at,
        )
    player = policy if isinstance(policy, Policy) else policy()
    try:
        return await run_batch(
            env_id, player, episodes=refs, limits=limits, env_kwargs=env_kwargs, on_episode=record,
            fork_at=fork_at,
        )  # fmt: skip
    finally:
        if player is not policy:  # built here: its HTTP pool or model lives in this event loop
            await player.close()
