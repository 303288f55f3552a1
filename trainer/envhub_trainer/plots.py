"""Reading a run directory back: metric rows, and the reward and throughput curves as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envhub_trainer.metrics import read_metrics, steps


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The metrics rows logged so far, as the dicts `train` returns (read through `read_metrics`)."""
    return [row.row() for row in read_metrics(run_dir)]


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Reward (train mean, pass rate, held-out eval) and tokens/s per step, saved as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir} has no metrics.jsonl rows yet: is it a run directory?")
    out = out or run_dir / "curves.png"
    train = steps(rows)
    evals = [r for r in rows if r.eval_reward is not None]
    at = [r.step for r in train]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(at, [r.reward_mean for r in train], label="train reward (mean)")
    top.plot(at, [r.pass_rate for r in train], label="train pass rate", alpha=0.6)
    if evals:
        top.plot([r.step for r in evals], [r.eval_reward for r in evals], "o-", label="held-out reward")
    top.set_ylabel("reward")
    top.legend()
    bottom.plot(at, [r.rollout_tokens_per_second for r in train], label="rollout tokens/s")
    bottom.plot(at, [r.train_tokens_per_second for r in train], label="train tokens/s")
    bottom.set_xlabel("step")
    bottom.set_ylabel("tokens / s")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
