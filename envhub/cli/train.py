"""`envhub train CONFIG.yaml` (GRPO), `envhub train --plot RUN_DIR` and `envhub report RUN_DIR`.

The trainer (torch, transformers) lives in the separate `envhub-trainer` package and is imported only
when a command runs, so `envhub --help` and every other command stay light.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envhub.cli.app import USER_ERRORS, app, console, fail

INSTALL_HINT = "the trainer is its own package: pip install -e trainer  (or pip install envhub-trainer)"


@app.command()
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
    except ImportError as exc:
        raise fail(ImportError(f"{INSTALL_HINT} ({exc})")) from None
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
            eval_text = f" eval {row['eval_reward']:.3f}" if "eval_reward" in row else ""
            progress.update(
                task,
                completed=row["step"],
                description=f"reward {row['reward_mean']:.3f} pass {row['pass_rate']:.2f}{eval_text}",
            )

        run_grpo(options, on_step=on_step)
    console.print(f"run written to {options.run_dir} (envhub report {options.run_dir})")


@app.command()
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


def _read(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # the line being written right now
    return rows


def _svg_chart(title: str, series: dict[str, list[tuple[float, float]]], width: int = 640) -> str:
    """A small inline SVG line chart, so the report needs no JavaScript or network."""
    points = [p for values in series.values() for p in values]
    if not points:
        return f"<p>{html.escape(title)}: no data yet</p>"
    height, pad = 220, 36
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(min(ys), 0.0), max(ys) if max(ys) > min(min(ys), 0.0) else 1.0
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]

    def at(x: float, y: float) -> str:
        sx = pad + (x - x0) / (x1 - x0) * (width - 2 * pad)
        sy = height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)
        return f"{sx:.1f},{sy:.1f}"

    lines, legend = [], []
    for k, (name, values) in enumerate(series.items()):
        colour = colours[k % len(colours)]
        lines.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{" ".join(at(x, y) for x, y in values)}"/>'
        )
        legend.append(f'<span style="color:{colour}">■ {html.escape(name)}</span>')
    return (
        f"<h3>{html.escape(title)}</h3><div>{' '.join(legend)}</div>"
        f'<svg width="{width}" height="{height}" style="border:1px solid #ddd">'
        f'<text x="4" y="14" font-size="11">{y1:.3g}</text>'
        f'<text x="4" y="{height - pad}" font-size="11">{y0:.3g}</text>'
        f'<text x="{width - pad}" y="{height - 8}" font-size="11">step {x1:.0f}</text>'
        f"{''.join(lines)}</svg>"
    )


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Curves, the time split between rollout (generation, env) and training, and sample episodes."""
    metrics = _read(run_dir / "metrics.jsonl")
    if not metrics and not (run_dir / "config.json").exists():
        raise ValueError(f"{run_dir} is not a training run directory (no metrics.jsonl or config.json)")
    steps = [r for r in metrics if "reward_mean" in r]

    def series(key: str) -> list[tuple[float, float]]:
        return [(float(r["step"]), float(r[key])) for r in metrics if key in r]

    totals = {
        key: sum(float(r.get(key, 0.0)) for r in steps)
        for key in (
            "generation_seconds",
            "env_seconds",
            "train_seconds",
            "sync_seconds",
            "rollout_wait_seconds",
        )
    }
    total = sum(v for k, v in totals.items() if k != "rollout_wait_seconds") or 1.0
    breakdown = "".join(
        f"<tr><td>{html.escape(k.removesuffix('_seconds'))}</td><td>{v:.1f} s</td>"
        f"<td>{100 * v / total:.0f}%</td></tr>"
        for k, v in totals.items()
        if k != "rollout_wait_seconds"
    )
    samples = _read(run_dir / "samples.jsonl")
    episodes = []
    for sample in samples[-20:]:
        turns = "".join(
            f"<div class='{html.escape(m['role'])}'><b>{html.escape(m['role'])}</b>: "
            f"<pre>{html.escape(m['text'])}</pre></div>"
            for m in sample["messages"]
        )
        episodes.append(
            f"<details><summary>step {sample['step']}, reward {sample['reward']:.3f}</summary>"
            f"{turns}</details>"
        )
    config = (run_dir / "config.json").read_text() if (run_dir / "config.json").exists() else "{}"
    latest = steps[-1] if steps else {}
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>envhub run {
        html.escape(run_dir.name)
    }</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:auto}} pre{{white-space:pre-wrap;margin:0}}
.assistant{{background:#eef6ff}} .user{{background:#f6f6f6}} td{{padding:2px 10px}}</style></head><body>
<h1>Training run {html.escape(str(run_dir))}</h1>
<p>{len(steps)} steps logged; latest step {latest.get("step", "-")}, reward {
        latest.get("reward_mean", 0):.3f},
pass rate {
        latest.get(
            "pass_rate", 0
        ):.2f}. The page reads the files as they are: reload it while the run goes on.</p>
{
        _svg_chart(
            "Reward",
            {
                "train reward": series("reward_mean"),
                "pass rate": series("pass_rate"),
                "held-out reward": series("eval_reward"),
            },
        )
    }
{
        _svg_chart(
            "Throughput (tokens/s)",
            {"rollout": series("rollout_tokens_per_second"), "train": series("train_tokens_per_second")},
        )
    }
{
        _svg_chart(
            "Optimisation",
            {
                "clip fraction": series("clip_fraction"),
                "kl": series("kl"),
                "IS weight mean": series("is_weight_mean"),
            },
        )
    }
<h3>Where the time went</h3><table>{breakdown}</table>
<p>Waiting for rollouts (async runs overlap them with training): {totals["rollout_wait_seconds"]:.1f} s</p>
<h3>Sample episodes (latest 20)</h3>{"".join(episodes) or "<p>none yet</p>"}
<h3>Configuration</h3><pre>{html.escape(config)}</pre></body></html>"""
    target = out or run_dir / "report.html"
    target.write_text(body)
    return target
