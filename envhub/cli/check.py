"""`envhub check ID...`: the arrival check of each environment, as a table; non-zero when one fails."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from envhub.checks import CheckReport, Status, check, save_report
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
    for n, env_id in enumerate(resolved, 1):
        with console.status(f"checking {env_id} ({n} of {len(resolved)})"):
            try:
                report = check(
                    env_id,
                    seeds=seeds,
                    episodes=episodes,
                    oracle_reward=oracle_reward,
                    env_kwargs=env_kwargs,
                    time_limit=timeout,
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
    failed = [r for r in reports if not r.passed]
    for report in failed:
        names = ", ".join(r.name for r in report.failures)
        errors.print(Text("failed: ", style="bold red") + Text(f"{report.env_id}: {names}"), highlight=False)
    if failed:
        raise typer.Exit(code=1)


def report_table(reports: list[CheckReport]) -> Table:
    """One row per check of each id; the reason is shown for anything but a pass."""
    table = Table(title="envhub check")
    table.add_column("id", style="bold", no_wrap=True)
    for column in ("check", "status", "figure", "detail"):
        table.add_column(column)
    for report in reports:
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
