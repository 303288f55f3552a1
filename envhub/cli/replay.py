"""`envhub replay` and `envhub rescore`: stored episodes played again against their recordings."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from envhub.cli.app import USER_ERRORS, app, console, fail
from envhub.record import regrade as regrading
from envhub.record import rescore as rescoring
from envhub.record.regrade import RegradeReport
from envhub.record.replay import ReplayReport, replay_episode
from envhub.record.rescore import find_episode, write_rescored

RUN = Annotated[Path, typer.Argument(help="A batch folder written by `envhub rollout --record --out`.")]


@app.command()
def replay(
    run: RUN,
    episode: Annotated[str, typer.Option(help="The episode to replay (3 or 000003).")],
) -> None:
    """Replay one episode against its recorded calls: same observations, and its reward under today's code.

    The recording must carry a seal (a MAC keyed by your recording key) that matches the episode;
    otherwise nothing is replayed. Exits with status 1 when the env diverged (asked for a call the
    recording does not hold, or answered differently), naming the first differing turn.
    """
    try:
        stored, env_kwargs = find_episode(run, episode)
        with console.status(f"replaying episode {stored.episode_id} of {stored.env_id}"):
            report = asyncio.run(replay_episode(stored, env_kwargs=env_kwargs, where=str(run)))
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    console.print(_episode_table(report))
    if report.divergence is not None:
        d = report.divergence
        console.print(
            Text(f"diverged at turn {d.turn}: {d.what}", style="bold red"), highlight=False, soft_wrap=True
        )
        console.print(Text(d.diff), highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)
    console.print(f"replayed {report.turns} turns: every observation as recorded, no sandbox opened")


def _episode_table(report: ReplayReport) -> Table:
    table = Table(title=f"episode {report.episode_id} of {report.env_id}")
    for column in ("", "recorded", "replayed"):
        table.add_column(column)
    new = "—" if report.reward is None else f"{report.reward:.3f}"
    table.add_row("reward", f"{report.recorded_reward:.3f}", new)
    for name in dict.fromkeys([*report.recorded_components, *report.reward_components]):
        before, after = report.recorded_components.get(name), report.reward_components.get(name)
        table.add_row(name, _number(before), "—" if report.reward is None else _number(after))
    return table


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


@app.command()
def rescore(
    run: RUN,
    out: Annotated[
        Path | None,
        typer.Option(help="Write the rescored batch to this new folder (the stored one is never changed)."),
    ] = None,
    regrade: Annotated[
        bool,
        typer.Option(
            "--regrade",
            help="Trust nothing recorded but the actions: play each episode's actions again in real "
            "sandboxes, grade afresh, and compare with the stored reward.",
        ),
    ] = False,
) -> None:
    """Re-score the recorded grader outputs of a batch with today's reward code; print changed rewards.

    Every sandbox command and grader output comes from the recording, nothing runs again: a fix to how a
    grade becomes a reward is applied, a wrong grade that was recorded stays wrong. Each recording must
    carry a seal (a MAC keyed by your recording key) that matches its episode, or nothing is rescored.
    With --regrade, the graders run again for real on the state the recorded actions build, and the
    fresh rewards are compared with the stored ones (no recording or seal needed).

    Nothing is written unless --out is given. Exits with status 1 when an episode diverged (or, with
    --regrade, could not be played to its end).
    """
    if regrade:
        if out is not None:
            raise fail(ValueError("--out writes rescored recordings; --regrade only compares: drop one"))
        _regrade(run)
        return
    progress = _progress("rescoring", "changed {task.fields[changed]} · diverged {task.fields[diverged]}")
    task = progress.add_task("", total=None, changed=0, diverged=0)
    seen: list[ReplayReport] = []

    def advance(report: ReplayReport) -> None:
        seen.append(report)
        changed = sum(r.reward_changed for r in seen)
        diverged = sum(r.divergence is not None for r in seen)
        progress.update(task, advance=1, changed=changed, diverged=diverged)

    try:
        with progress:
            episodes, reports = asyncio.run(rescoring.rescore(run, on_episode=advance))
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    console.print(_changes_table(reports))
    changed = sum(r.reward_changed for r in reports)
    diverged = [r for r in reports if r.divergence is not None]
    console.print(
        f"{len(reports)} episodes replayed from their recorded grader outputs: {changed} rewards changed, "
        f"{len(diverged)} diverged",
        highlight=False,
        soft_wrap=True,
    )
    for r in diverged[:5]:
        d = r.divergence
        assert d is not None
        console.print(
            f"episode {r.episode_id} diverged at turn {d.turn}: {d.what}", highlight=False, soft_wrap=True
        )
    if out is not None:
        try:
            written = write_rescored(run, out, episodes, reports)
        except USER_ERRORS as exc:
            raise fail(exc) from exc
        console.print(f"rescored batch written to {written}")
    if diverged:
        raise typer.Exit(code=1)


def _regrade(run: Path) -> None:
    """`rescore --regrade`: every episode's actions graded afresh in real sandboxes."""
    progress = _progress("regrading", "differ {task.fields[differ]} · failed {task.fields[failed]}")
    task = progress.add_task("", total=None, differ=0, failed=0)
    seen: list[RegradeReport] = []

    def advance(report: RegradeReport) -> None:
        seen.append(report)
        differ = sum(r.reward_differs for r in seen)
        progress.update(task, advance=1, differ=differ, failed=sum(r.reward is None for r in seen))

    try:
        episodes, env_kwargs = rescoring.stored(run)
        with progress:
            reports = asyncio.run(regrading.regrade(episodes, env_kwargs, on_episode=advance))
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    table = Table(title="rewards graded afresh that differ from the stored ones")
    for column in ("episode", "stored", "fresh", "components changed", "stored seal"):
        table.add_column(column)
    for r in reports:
        if not r.reward_differs:
            continue
        changes = ", ".join(
            f"{n} {_number(r.stored_components.get(n))}→{_number(r.reward_components.get(n))}"
            for n in r.changed_components
        )
        seal_state = {True: "verifies", False: "FAILS", None: "not recorded"}[r.sealed]
        table.add_row(r.episode_id, f"{r.stored_reward:.3f}", f"{r.reward:.3f}", changes, seal_state)
    console.print(table)
    differ = sum(r.reward_differs for r in reports)
    failed = [r for r in reports if r.reward is None]
    console.print(
        f"{len(reports)} episodes regraded in real sandboxes: {differ} rewards differ from the stored ones, "
        f"{len(failed)} could not be played to their end",
        highlight=False,
        soft_wrap=True,
    )
    for r in failed[:5]:
        console.print(f"episode {r.episode_id}: {r.problem}", highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(code=1)


def _progress(what: str, counts: str) -> Progress:
    return Progress(
        TextColumn(f"[bold]{what}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(counts),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _changes_table(reports: list[ReplayReport]) -> Table:
    table = Table(title="changed rewards")
    for column in ("episode", "old", "new", "components changed"):
        table.add_column(column)
    for r in reports:
        if not r.reward_changed:
            continue
        changes = ", ".join(
            f"{n} {_number(r.recorded_components.get(n))}→{_number(r.reward_components.get(n))}"
            for n in r.changed_components
        )
        table.add_row(r.episode_id, f"{r.recorded_reward:.3f}", f"{r.reward:.3f}", changes)
    return table
