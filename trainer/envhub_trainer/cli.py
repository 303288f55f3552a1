"""`envhub train CONFIG.yaml` (GRPO), `envhub train --plot RUN_DIR` and `envhub report RUN_DIR`.

Command plugins (the `envhub.commands` entry points `train` and `report` in pyproject.toml). torch and
transformers are imported only when a command runs, so `envhub --help` stays light.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envhub.cli.app import USER_ERRORS, console, fail
from envhub_trainer.metrics import StepMetrics
from envhub_trainer.report import write_report

train_app = typer.Typer(add_completion=False)  # completion belongs to the root `envhub` command
report_app = typer.Typer(add_completion=False)


@train_app.command()
def train(
    config: Annotated[
        Path | None, typer.Argument(help="A YAML run configuration (see docs/trainer.md).")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Instead of training, draw RUN_DIR's reward and throughput curves.")
    ] = None,
) -> None:
    """Train a model with GRPO on an envhub environment; resumes from RUN_DIR/checkpoint if present."""
    try:
        from envhub_trainer.config import load_config
        from envhub_trainer.grpo import train as run_grpo
        from envhub_trainer.plots import plot_run
    except ImportError as exc:  # torch or transformers missing or broken
        raise fail(ImportError(f"the trainer's dependencies could not be imported: {exc}")) from None
    try:
        if plot is not None:
            console.print(f"wrote {plot_run(plot)}")
            return
        if config is None:
            raise ValueError("give a CONFIG.yaml to train, or --plot RUN_DIR")
        options = load_config(config)
    except USER_ERRORS as exc:
        raise fail(exc) from None
    if os.environ.get("RANK", "0") != "0":  # one of torchrun's other ranks: it trains, rank 0 reports
        run_grpo(options)
        return
    with Progress(  # with `data_parallel`, this process is rank 0: the rows come straight to on_step
        TextColumn("[bold]GRPO"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
    ) as progress:
        task = progress.add_task("", total=options.steps)

        def on_step(row: dict[str, Any]) -> None:
            step = StepMetrics.model_validate(row)
            eval_text = f" eval {step.eval_reward:.3f}" if step.eval_reward is not None else ""
            progress.update(
                task,
                completed=step.step,
                description=f"reward {step.reward_mean:.3f} pass {step.pass_rate:.2f}{eval_text}",
            )

        run_grpo(options, on_step=on_step)
    console.print(f"run written to {options.run_dir} (envhub report {options.run_dir})")


@report_app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `envhub train`.")],
    out: Annotated[
        Path | None, typer.Option(help="Where to write the HTML (default RUN_DIR/report.html).")
    ] = None,
) -> None:
    """A self-contained HTML report of a training run (works while it is still running)."""
    try:
        target = write_report(run_dir, out)
    except USER_ERRORS as exc:
        raise fail(exc) from None
    console.print(f"wrote {target}")
