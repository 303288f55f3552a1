"""`envhub rollout` and `envhub show`: generate a batch of episodes to disk, and look at one."""

from __future__ import annotations

import asyncio
import enum
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from envhub.cli.app import USER_ERRORS, app, console, errors, fail, parse_kwargs
from envhub.display import lock_summary, print_episode
from envhub.lock.lockfile import check as check_lock
from envhub.policies import SPECS, Policy, Sampling, load_policy
from envhub.records import Episode
from envhub.registration import registry
from envhub.report import write_html_report
from envhub.rollout import (
    EpisodeRef,
    RolloutLimits,
    RolloutResult,
    error_rate_problem,
    fresh_run_dir,
    plan,
    summarize,
    summary_table,
)
from envhub.rollout import rollout as batch_rollout
from envhub.rollout.ray_runner import PolicyFactory, RayWorkerLost
from envhub.store import Manifest, load_manifest, read_episodes

DEFAULT_POLICY = "oracle"
DEFAULT_POLICY_NOTE = (
    "no --policy given, so the oracle plays: the env's own reference solution, whose rewards are the "
    "env's ceiling (often 100% solved), not a model's score. Choose who plays with --policy: "
    f"{SPECS}"
)
"""Why the default is said out loud: a newcomer's first batch otherwise reports 100% solved unexplained."""


class ToolFormat(enum.StrEnum):
    native = "native"
    text = "text"


class _Tally:
    """Running figures for the progress bar."""

    def __init__(self) -> None:
        self.done = 0
        self.reward = 0.0
        self.failures = 0
        self.started = time.perf_counter()

    def add(self, episode: Episode) -> None:
        self.done += 1
        self.reward += episode.reward
        self.failures += episode.error is not None

    def show(self, progress: Progress, task: TaskID, *, advance: int = 0) -> None:
        elapsed = time.perf_counter() - self.started
        progress.update(
            task,
            advance=advance,
            reward=self.reward / self.done if self.done else 0.0,
            failures=self.failures,
            rate=self.done / elapsed if elapsed > 0 else 0.0,
        )


PolicyOption = Annotated[
    str | None,
    typer.Option(
        help=f"Who plays: {SPECS}. Without it the oracle plays (the env's reference solution: "
        "its rewards are the env's ceiling, not a model's score), and the command says so.",
        show_default=False,
    ),
]
TasksOption = Annotated[
    int,
    typer.Option(
        "--tasks", "-n", "--episodes", min=1, help="Tasks: seeds SEED, SEED+1, ... (--episodes is the same)."
    ),
]
RolloutsOption = Annotated[
    int, typer.Option("--rollouts", "-r", min=1, help="Rollouts per task; the summary shows pass@k.")
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option(
        min=1, help="Episodes in flight at once (default 8; openenv:URL: at most the server's sessions)."
    ),
]
SeedOption = Annotated[int, typer.Option(help="Task i uses seed SEED + i.")]
KwargOption = Annotated[list[str] | None, typer.Option(help="Env option KEY=VALUE (repeatable).")]
ModelOption = Annotated[
    str | None, typer.Option(help="The model an openai server serves (instead of openai:URL#MODEL).")
]
TemperatureOption = Annotated[float | None, typer.Option(min=0, help="Sampling temperature.")]
TopPOption = Annotated[float | None, typer.Option(min=0, max=1, help="Nucleus sampling (openai).")]
MaxTokensOption = Annotated[int | None, typer.Option(min=1, help="Most tokens per model turn.")]
LogprobsOption = Annotated[
    bool | None,
    typer.Option(
        "--logprobs/--no-logprobs",
        help="Ask the server for token ids and logprobs (default: ask, store text only if refused).",
    ),
]
ToolFormatOption = Annotated[
    ToolFormat | None,
    typer.Option(
        help="native: tools in the request (needs the server's tool parser); text: tools in the "
        "prompt, <tool_call> blocks parsed from the reply (any server)."
    ),
]
OutOption = Annotated[
    Path | None,
    typer.Option(help="Batch directory (default: a new folder under runs/); resumable with --resume."),
]
ResumeOption = Annotated[bool, typer.Option(help="Complete the batch already in --out.")]
RetryErrorsOption = Annotated[
    bool, typer.Option(help="With --resume: play the episodes that ended in error in --out again.")
]
MaxErrorRateOption = Annotated[
    float, typer.Option(min=0, max=1, help="Exit with status 1 when more of the batch's episodes failed.")
]
StepTimeoutOption = Annotated[
    float | None, typer.Option(min=0.001, help="Seconds per policy call or env step.")
]
EpisodeTimeoutOption = Annotated[
    float | None, typer.Option(min=0.001, help="Seconds per episode, then truncated.")
]
TimeBudgetOption = Annotated[
    float | None, typer.Option(min=0.001, help="Seconds for the batch; stragglers are truncated.")
]
RetriesOption = Annotated[int, typer.Option(min=0, help="Retries of infrastructure failures.")]
ShardSizeOption = Annotated[int, typer.Option(min=1, help="Episodes per Parquet shard.")]
BackendOption = Annotated[
    str,
    typer.Option(
        help="Where episodes run (`runs_on` in Python): local (asyncio, this process), ray (a local Ray "
        "instance), or the address of a Ray cluster: auto, ray://HOST:PORT."
    ),
]
LockedOption = Annotated[
    Path | None,
    typer.Option(help="A lockfile from `envhub lock`: refuse to run if anything it pins has changed."),
]
RecordOption = Annotated[
    bool,
    typer.Option(
        "--record",
        help="Keep each episode's sandbox, REPL and tool calls, for `envhub replay` and `rescore`.",
    ),
]
ForkAtOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Per task, play one prefix of this many turns, fork the env --group times there and "
        "finish each child on its own (stored with parent and fork_turn).",
    ),
]
GroupOption = Annotated[
    int, typer.Option(min=1, help="With --fork-at: children forked from each task's prefix.")
]


@dataclass(frozen=True)
class _Job:
    """A batch the options asked for, checked: what `_run` plays, and what it says when interrupted."""

    env_id: str
    resolved: str
    factory: PolicyFactory
    player: Policy
    refs: list[EpisodeRef]
    limits: RolloutLimits
    env_kwargs: dict[str, Any]
    seed: int
    out: Path
    resume: bool
    retry_errors: bool
    shard_size: int
    runs_on: str
    label: str
    fork_at: int | None


@app.command()
def rollout(
    env_id: str,
    policy: PolicyOption = None,
    tasks: TasksOption = 32,
    rollouts: RolloutsOption = 1,
    concurrency: ConcurrencyOption = None,
    seed: SeedOption = 0,
    kwarg: KwargOption = None,
    model: ModelOption = None,
    temperature: TemperatureOption = None,
    top_p: TopPOption = None,
    max_tokens: MaxTokensOption = None,
    logprobs: LogprobsOption = None,
    tool_format: ToolFormatOption = None,
    out: OutOption = None,
    resume: ResumeOption = False,
    retry_errors: RetryErrorsOption = False,
    max_error_rate: MaxErrorRateOption = 0.1,
    step_timeout: StepTimeoutOption = None,
    episode_timeout: EpisodeTimeoutOption = None,
    time_budget: TimeBudgetOption = None,
    retries: RetriesOption = 1,
    shard_size: ShardSizeOption = 256,
    backend: BackendOption = "local",
    locked: LockedOption = None,
    record_calls: RecordOption = False,
    fork_at: ForkAtOption = None,
    group: GroupOption = 4,
) -> None:
    """Generate a batch of episodes, with a progress bar and a summary table; resumable with --resume.

    Exits with status 1 when more than --max-error-rate of the batch's episodes failed (an unreachable
    server, a crashing env), with the reason in one line; `--resume --retry-errors` plays those again.
    """
    policy_given = policy is not None
    if policy is None:
        errors.print(Text("note: ", style="bold yellow") + Text(DEFAULT_POLICY_NOTE), highlight=False)
        policy = DEFAULT_POLICY
    try:
        if resume and out is None:
            raise ValueError("--resume completes a stored batch: give its folder with --out")
        env_kwargs = parse_kwargs(kwarg or [])
        sampling = Sampling(
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            logprobs=logprobs,
            tool_format=tool_format.value if tool_format else None,
        )
        factory = functools.partial(load_policy, policy, model=model, sampling=sampling)
        player = factory()  # a bad spec or setting fails here, before anything runs
        label = _label(policy, model, sampling, rollouts, fork_at, group)
        limits = RolloutLimits(
            concurrency=_concurrency(env_id, concurrency),
            step_timeout=step_timeout,
            episode_timeout=episode_timeout,
            time_budget=time_budget,
            retries=retries,
            record=record_calls,
        )
        if fork_at is not None and rollouts > 1:
            raise ValueError("--fork-at plays --group children per task; leave --rollouts at 1")
        per_task = rollouts if fork_at is None else group + 1  # a fork group: the prefix, then its children
        resolved = registry.spec(env_id).id
        if locked is not None:
            check_lock(locked, resolved, env_kwargs)  # before anything runs or is stored
        job = _Job(
            env_id, resolved, factory, player, plan(tasks, rollouts=per_task, seed=seed), limits, env_kwargs,
            seed, out or fresh_run_dir(resolved), resume, retry_errors, shard_size, backend, label, fork_at,
        )  # fmt: skip
    except (*USER_ERRORS, ModuleNotFoundError, ValidationError) as exc:
        raise fail(exc) from exc
    _report(_run(job), max_error_rate, default_policy=not policy_given)


def _concurrency(env_id: str, given: int | None) -> int:
    """--concurrency, else 8; an openenv: id plays at most its server's sessions by default."""
    if given is not None or not env_id.startswith("openenv:"):
        return given or 8
    from envhub.integrations.openenv.env import rollout_concurrency  # only for openenv: ids

    concurrency, note = rollout_concurrency(env_id, 8)
    if note:
        console.print(note, highlight=False, soft_wrap=True)
    return concurrency


def _run(job: _Job) -> RolloutResult:
    """Play the batch under a progress bar; interrupted, say what is stored and how to finish."""
    progress = _progress_bar()
    tally = _Tally()
    task = progress.add_task(job.resolved, total=None, reward=0.0, failures=0, rate=0.0)

    def started(total: int, stored: int) -> None:
        """The options passed their checks and the store is open: say where, and show the bar."""
        console.print(f"{'resuming' if job.resume else 'storing'} the batch in {job.out}")
        progress.update(task, total=total, completed=stored)
        tally.show(progress, task)
        progress.start()

    def record(episode: Episode) -> None:
        tally.add(episode)
        tally.show(progress, task, advance=1)

    async def run() -> RolloutResult:
        try:
            return await batch_rollout(
                job.env_id,
                job.player if job.runs_on == "local" else job.factory,
                episodes=job.refs,
                limits=job.limits,
                env_kwargs=job.env_kwargs,
                seed=job.seed,
                out=job.out,
                resume=job.resume,
                retry_errors=job.retry_errors,
                shard_size=job.shard_size,
                runs_on=job.runs_on,
                policy_label=job.label,
                on_start=started,
                on_episode=record,
                fork_at=job.fork_at,
            )
        finally:
            await job.player.close()  # the HTTP connection pool or local model lives in this loop

    try:
        return asyncio.run(run())  # rollout() runs the batch under envhub's GC policy
    except (*USER_ERRORS, ModuleNotFoundError, RayWorkerLost) as exc:
        _stop(progress)
        raise fail(exc) from exc
    except KeyboardInterrupt:
        _stop(progress)
        manifest = load_manifest(job.out)
        stored = manifest.episodes_done if manifest else 0
        errors.print(
            f"interrupted: {stored} of {len(job.refs)} episodes are stored in {job.out}; "
            "run the same command with --resume to finish"
        )
        raise typer.Exit(code=130) from None
    finally:
        _stop(progress)


def _stop(progress: Progress) -> None:
    """Stop the bar if it was shown: an unstarted one would print a blank line."""
    if progress.live.is_started:
        progress.stop()


def _label(
    policy: str, model: str | None, sampling: Sampling, rollouts: int, fork_at: int | None, group: int
) -> str:
    """How the manifest names who played and how (`openai#m temperature=0.7 rollouts=4`): a resume
    with other settings would mix two batches, so the store refuses it by this name."""
    parts = [policy, f"model={model}" if model else "", sampling.describe()]
    parts.append(f"rollouts={rollouts}" if rollouts > 1 else "")  # episode i plays task i // rollouts
    parts.append(f"fork-at={fork_at} group={group}" if fork_at is not None else "")
    return " ".join(p for p in parts if p)


def _progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]:.3f} · failures {task.fields[failures]}"),
        TextColumn("· {task.fields[rate]:.1f} ep/s"),
        TimeElapsedColumn(),
        console=console,
    )


def _report(result: RolloutResult, max_error_rate: float, *, default_policy: bool = False) -> None:
    """The summary table and where the batch is; exit 1 with the reason when too many episodes failed.
    When no --policy was given the oracle's figures are said to be the oracle's, under the table too."""
    if result.episodes:
        console.print(summary_table(summarize(result.episodes)))
    if default_policy:
        errors.print(
            Text("note: ", style="bold yellow")
            + Text("played by the oracle (no --policy given): these are the reference solution's rewards"),
            highlight=False,
        )
    if result.retried:
        console.print(f"played again {len(result.retried)} episodes that had ended in error")
    if result.not_started:
        errors.print(
            f"the time budget ran out before {len(result.not_started)} episodes started; "
            "run the same command with --resume to finish them"
        )
    console.print(
        f"{len(result.episodes)} episodes in {result.out} "
        f"(this run: {result.played}, {result.wall_seconds:.1f} s)"
    )
    problem = error_rate_problem(result.episodes, max_error_rate)
    if problem is not None:
        errors.print(
            Text("error: ", style="bold red")
            + Text(f"{problem}; fix the cause, then run again with --resume --retry-errors"),
            highlight=False,
        )
        raise typer.Exit(code=1)


@app.command()
def show(
    directory: Annotated[Path, typer.Argument(help="A batch directory written by `envhub rollout --out`.")],
    episode: Annotated[str | None, typer.Option(help="Print this episode turn by turn.")] = None,
    html: Annotated[Path | None, typer.Option(help="Write a self-contained HTML report here.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Episodes listed in the table.")] = 20,
) -> None:
    """Summarize a stored batch, or print one episode turn by turn; with --html, also write the batch's
    HTML report (opened at that episode when one is given)."""
    try:
        manifest = load_manifest(directory)
        episodes = read_episodes(directory)
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    if not episodes:
        raise fail(ValueError(f"{directory} holds no episodes yet"))
    shown: Episode | None = None
    if episode is not None:
        chosen = [e for e in episodes if e.episode_id == episode or e.episode_id == episode.zfill(6)]
        if not chosen:
            raise fail(
                ValueError(
                    f"no episode {episode!r} in {directory}; "
                    f"ids run from {episodes[0].episode_id} to {episodes[-1].episode_id}"
                )
            )
        shown = chosen[0]
        print_episode(shown, console)
    else:
        _batch_summary(directory, manifest, episodes, limit)
    if html is not None:
        path = write_html_report(episodes, html, title=f"{episodes[0].env_id} · {directory}")
        anchor = f" (episode {shown.episode_id}: {path}#{shown.episode_id})" if shown else ""
        console.print(f"report written to {path}{anchor}", soft_wrap=True)


def _batch_summary(directory: Path, manifest: Manifest | None, episodes: list[Episode], limit: int) -> None:
    """The summary table, the batch's state and lock, and the first `limit` episodes."""
    console.print(summary_table(summarize(episodes)))
    if manifest is not None:
        state = "complete" if manifest.complete else "incomplete: run the rollout again with --resume"
        console.print(f"{manifest.episodes_done} of {manifest.episodes_requested} episodes ({state})")
    console.print(lock_summary(episodes), soft_wrap=True)  # one line, for grep
    table = Table(title=f"episodes (first {min(limit, len(episodes))} of {len(episodes)})")
    for column in ("id", "seed", "reward", "turns", "ending", "error"):
        table.add_column(column)
    for e in episodes[:limit]:
        table.add_row(
            e.episode_id,
            str(e.seed),
            f"{e.reward:.3f}",
            str(len(e.turns)),
            e.ending,
            e.error.message if e.error else "",
        )
    console.print(table)
