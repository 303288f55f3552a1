"""Reading a run directory back: metric rows, and the reward and throughput curves as a PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_rows(run_dir: Path, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
    """The rows logged so far; a half-written last line (a run in progress) is skipped."""
    path = run_dir / name
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Reward (train mean, pass rate, held-out eval) and tokens/s per step, saved as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(run_dir)
    if not rows:
        raise ValueError(f"{run_dir} has no metrics.jsonl rows yet: is it a run directory?")
    out = out or run_dir / "curves.png"
    train = [r for r in rows if "reward_mean" in r]
    evals = [r for r in rows if "eval_reward" in r]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot([r["step"] for r in train], [r["reward_mean"] for r in train], label="train reward (mean)")
    top.plot([r["step"] for r in train], [r["pass_rate"] for r in train], label="train pass rate", alpha=0.6)
    if evals:
        top.plot([r["step"] for r in evals], [r["eval_reward"] for r in evals], "o-", label="held-out reward")
    top.set_ylabel("reward")
    top.legend()
    steps = [r["step"] for r in train]
    bottom.plot(steps, [r["rollout_tokens_per_second"] for r in train], label="rollout tokens/s")
    bottom.plot(steps, [r["train_tokens_per_second"] for r in train], label="train tokens/s")
    bottom.set_xlabel("step")
    bottom.set_ylabel("tokens / s")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
