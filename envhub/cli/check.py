"""`envhub check ID...`: the arrival check of each environment, as a table; non-zero when one fails."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from envhub.checks import CHECKS, CheckReport, Status, check, save_report
from envhub.cli.app import USER_ERRORS, app, console, errors, fail, parse_kwargs
from envhub.registration import registry

_STYLE: dict[Status, str] = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


@app.command("check")
def check_envs(
    env_ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Environment ids to check.")],
    seeds: Annotated[int, typer.Option(min=1, help="Seeds reset twice each for determinism.")] = 3,
    episodes: Annotated[
        int, typer.Option(min=1, help="Episodes for the oracle and the random baseline (seeds 0, 1, ...).")
    ] = 3,
    oracle_reward: Annotated[
        float | None,
        typer.Option(
            help="The reward the reference solution must reach on every episode "
            "[default: the env's reference_reward, else 1.0]."
        ),
    ] = None,
    kwarg: Annotated[
        list[str] | None, typer.Option("--kwarg", help="Env option KEY=VALUE (repeatable), for every ID.")
    ] = None,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds for one reset or one episode.")] = 600.0,
    save: Annotated[
        bool, typer.Option(help="Keep each report as the id's last check, which `envhub info` shows.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the reports as JSON.")] = False,
) -> None:
    """Check that environments work on arrival: seeded resets, the oracle's reward, a random baseline
    and a round trip through the episode store."""
    try:
        env_kwargs = parse_kwargs(kwarg or [])
        resolved = [registry.spec(env_id).id for env_id in env_ids]  # a typo fails before any check runs
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    reports: list[CheckReport] = []
    with _CheckProgress(len(resolved)) as progress:
        for env_id in resolved:
            progress.next_id(env_id)
            try:
                report = check(
                    env_id,
                    seeds=seeds,
                    episodes=episodes,
                    oracle_reward=oracle_reward,
                    env_kwargs=env_kwargs,
                    time_limit=timeout,
                    on_check=progress.started,
                )
            except USER_ERRORS as exc:
                raise fail(exc) from exc
            if save:
                save_report(report)
            reports.append(report)
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in reports], indent=2))
    else:
        console.print(report_table(reports))
    for report in reports:
        if not report.available:
            line = Text("unavailable: ", style="bold yellow") + Text(
                f"{report.env_id}: {report.unavailable_reason}"
            )
            errors.print(line, highlight=False)
    failed = [r for r in reports if r.available and not r.passed]
    for report in failed:
        names = ", ".join(r.name for r in report.failures)
        errors.print(Text("failed: ", style="bold red") + Text(f"{report.env_id}: {names}"), highlight=False)
    if failed or any(not r.available for r in reports):
        raise typer.Exit(code=1)


class _CheckProgress:
    """Which id and which of its checks is running: rich's progress bars on a terminal (per id and per
    check, gone when done); off one, a line on stderr as each check starts, so a log shows where a
    long check is."""

    def __init__(self, ids: int) -> None:
        self.ids = ids
        self.env_id = ""
        self.live = errors.is_terminal
        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=errors,
            transient=True,
        )
        self.id_task = self.bars.add_task("ids", total=ids, visible=ids > 1)
        self.check_task = self.bars.add_task("", total=len(CHECKS))

    def __enter__(self) -> _CheckProgress:
        if self.live:
            self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.bars.stop()

    def next_id(self, env_id: str) -> None:
        if self.env_id:
            self.bars.advance(self.id_task)
        self.env_id = env_id

    def started(self, name: str) -> None:
        done = CHECKS.index(name)
        n = self.bars.tasks[self.id_task].completed + 1
        where = f"{self.env_id} ({n:g} of {self.ids})" if self.ids > 1 else self.env_id
        self.bars.update(self.check_task, completed=done, description=f"{where}: {name}")
        if not self.live:
            errors.print(f"checking {where}: {name} ({done + 1} of {len(CHECKS)})", highlight=False)


def report_table(reports: list[CheckReport]) -> Table:
    """One row per check of each id; the reason is shown for anything but a pass."""
    table = Table(title="envhub check")
    table.add_column("id", style="bold", no_wrap=True)
    for column in ("check", "status", "figure", "detail"):
        table.add_column(column)
    for report in reports:
        if not report.available:
            reason = f"unavailable: {report.unavailable_reason}"
            table.add_row(
                report.env_id, "all", Text("unavailable", style="yellow"), "", reason, end_section=True
            )
            continue
        for i, result in enumerate(report.results):
            table.add_row(
                report.env_id if i == 0 else "",
                result.name,
                Text(result.status, style=_STYLE[result.status]),
                result.figure,
                result.detail,
                end_section=i == len(report.results) - 1,
            )
    return table
