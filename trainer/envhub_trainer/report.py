"""`envhub report RUN_DIR`: a self-contained HTML page of a training run (curves, time split, episodes).

It reads metrics.jsonl through the trainer's own row types (`envhub_trainer.metrics`), so a renamed or
retyped figure fails here, loudly, instead of leaving a curve empty. No torch: it runs beside training.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envhub_trainer.metrics import EvalMetrics, StepMetrics, read_metrics, steps


def _rows(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines file's rows (samples.jsonl, runtime.jsonl); a half-written last line (a run in
    progress) is skipped."""
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # the line being written right now
    return rows


def _curve(points: Iterable[tuple[int, float | None]]) -> list[tuple[float, float]]:
    """(step, value) pairs to draw: the steps that logged the value."""
    return [(float(step), value) for step, value in points if value is not None]


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


def _memory_summary(trained: list[StepMetrics]) -> str:
    """The run's peak RSS and how far the last step's stands above the first's: growth from step to
    step is a leak to look into (a long run would end out of memory)."""
    recorded = [(r.step, r.peak_rss_gib) for r in trained if r.peak_rss_gib is not None]
    if not recorded:
        return "Peak RSS: not recorded by this run."
    step, top = max(recorded, key=lambda pair: pair[1])
    (first_step, first), (last_step, last) = recorded[0], recorded[-1]
    change = (
        f"; step {last_step} {last - first:+.2f} GiB against step {first_step}" if len(recorded) > 1 else ""
    )
    return f"Peak RSS: {top:.2f} GiB at step {step}{change}."


def _process_summary(starts: list[dict[str, Any]]) -> str:
    """What each start of the run's process ran with (runtime.jsonl): a run slower than another may owe
    it to its process (no huge pages, fewer threads) rather than to its code or config."""
    if not starts:
        return "The process: not recorded by this run."
    said = []
    for row in starts:
        resumed = row["resumed_from_step"]
        how = "started" if resumed is None else f"resumed at step {resumed}"
        said.append(
            f"{how} {row['started_at']}: torch {row['torch']}, {row['torch_threads']} threads,"
            f" huge pages for large tensors {_yes(row['huge_pages'])},"
            f" freed memory kept {_yes(row['kept_freed_memory'])}"
        )
    return html.escape("The process: " + "; ".join(said) + ".")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _time_split(trained: list[StepMetrics]) -> tuple[str, float]:
    """The table rows of where a step's time went, and the time spent waiting for rollouts (apart: async
    runs overlap it with training, so it is no share of the total)."""
    totals = {
        "generation_seconds": sum(r.generation_seconds for r in trained),
        "env_seconds": sum(r.env_seconds for r in trained),
        "train_seconds": sum(r.train_seconds for r in trained),
        "sync_seconds": sum(r.sync_seconds for r in trained),
        "rollout_wait_seconds": sum(r.rollout_wait_seconds for r in trained),
    }
    total = sum(v for k, v in totals.items() if k != "rollout_wait_seconds") or 1.0
    breakdown = "".join(
        f"<tr><td>{html.escape(k.removesuffix('_seconds'))}</td><td>{v:.1f} s</td>"
        f"<td>{100 * v / total:.0f}%</td></tr>"
        for k, v in totals.items()
        if k != "rollout_wait_seconds"
    )
    return breakdown, totals["rollout_wait_seconds"]


def _episodes(samples: list[dict[str, Any]]) -> str:
    """The latest 20 sample episodes, each a folded block of its turns."""
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
    return "".join(episodes)


def _charts(trained: list[StepMetrics], metrics: list[StepMetrics | EvalMetrics]) -> str:
    """Reward, throughput, optimisation and memory curves, one SVG chart each."""
    charts = [
        _svg_chart(
            "Reward",
            {
                "train reward": _curve((r.step, r.reward_mean) for r in trained),
                "pass rate": _curve((r.step, r.pass_rate) for r in trained),
                "held-out reward": _curve((r.step, r.eval_reward) for r in metrics),
            },
        ),
        _svg_chart(
            "Throughput (tokens/s)",
            {
                "rollout": _curve((r.step, r.rollout_tokens_per_second) for r in trained),
                "train": _curve((r.step, r.train_tokens_per_second) for r in trained),
            },
        ),
        _svg_chart(
            "Optimisation",
            {
                "clip fraction": _curve((r.step, r.clip_fraction) for r in trained),
                "kl": _curve((r.step, r.kl) for r in trained),
                "IS weight mean": _curve((r.step, r.is_weight_mean) for r in trained),
            },
        ),
        _svg_chart(
            "Memory (GiB)", {"peak RSS of the step": _curve((r.step, r.peak_rss_gib) for r in trained)}
        ),
    ]
    return "\n".join(charts)


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Curves, the time split between rollout (generation, env) and training, and sample episodes."""
    metrics = read_metrics(run_dir)
    if not metrics and not (run_dir / "config.json").exists():
        raise ValueError(f"{run_dir} is not a training run directory (no metrics.jsonl or config.json)")
    trained = steps(metrics)

    breakdown, rollout_wait = _time_split(trained)
    episodes = _episodes(_rows(run_dir / "samples.jsonl"))
    config = (run_dir / "config.json").read_text() if (run_dir / "config.json").exists() else "{}"
    latest = trained[-1] if trained else None
    progress = (
        f"latest step {latest.step}, reward {latest.reward_mean:.3f},\npass rate {latest.pass_rate:.2f}"
        if latest
        else "latest step -, reward 0.000,\npass rate 0.00"
    )
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>envhub run {
        html.escape(run_dir.name)
    }</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:auto}} pre{{white-space:pre-wrap;margin:0}}
.assistant{{background:#eef6ff}} .user{{background:#f6f6f6}} td{{padding:2px 10px}}</style></head><body>
<h1>Training run {html.escape(str(run_dir))}</h1>
<p>{len(trained)} steps logged; {
        progress
    }. The page reads the files as they are: reload it while the run goes on.</p>
{_charts(trained, metrics)}
<p>{_memory_summary(trained)}</p>
<p>{_process_summary(_rows(run_dir / "runtime.jsonl"))}</p>
<h3>Where the time went</h3><table>{breakdown}</table>
<p>Waiting for rollouts (async runs overlap them with training): {rollout_wait:.1f} s</p>
<h3>Sample episodes (latest 20)</h3>{episodes or "<p>none yet</p>"}
<h3>Configuration</h3><pre>{html.escape(config)}</pre></body></html>"""
    target = out or run_dir / "report.html"
    target.write_text(body)
    return target
