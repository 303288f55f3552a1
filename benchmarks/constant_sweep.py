"""Constant replies against every answer-graded env: does any score pay a reply that reads nothing?

    .venv/bin/python benchmarks/constant_sweep.py [--seeds 20] [--family reasoning-gym|first-party]
        [--full] [NAME ...]

Plays each of `CONSTANTS` (30 replies: small numbers, yes/no, letters, empty, a long string, hedges,
lists, a grid) on seeds 0..N-1 of every Reasoning Gym dataset (inside `<answer>` tags, as the system
prompt asks) and of every first-party env that takes a plain reply as its answer (arithmetic, countdown,
guess-number, vision, tool-use), through the env's own `reset` and reward.

A constant is *right* on an item when it is the item's answer (the reference answer, case and spaces
aside, or equal as a number). Its **base rate** is the share of items it is right on: what guessing it
earns honestly (about 1/k for a multiple choice of k, 0.5 for yes/no). A score that pays a constant more
than its base rate pays for nothing; each such (env, constant) is printed under "paid above base rate",
and the script exits 1 when there is one.

Prints one row per env: the best base rate of any constant, the constant paid most above its base rate
and by how much. `--full` adds the mean reward of every constant (30 columns).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import math
import statistics
import time
import warnings
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import envhub
from envhub.authoring.rewards import score

LONG = " ".join(["the answer is not known"] * 80)
CONSTANTS: tuple[str, ...] = (
    "0",
    "1",
    "-1",
    "2",
    "3",
    "5",
    "10",
    "100",
    "0.5",
    "1/2",
    "yes",
    "no",
    "True",
    "False",
    "",
    "A",
    "B",
    "a",
    "x",
    "None",
    LONG,
    "0 or 1",
    "True or False",
    "A, B, C, D",
    "[]",
    "[0]",
    "[1, 2, 3]",
    "{}",
    "0 0 0\n0 0 0\n0 0 0",
    "1 2 3 4 5",
)
"""Thirty replies that read nothing of the question."""
TOLERANCE = 1e-9


def label(constant: str) -> str:
    """A constant as a table header: short, one line."""
    if constant == LONG:
        return "long"
    if constant == "":
        return "(empty)"
    return constant.replace("\n", "/")[:12]


def _number(text: str) -> Fraction | None:
    try:
        return Fraction(text.strip().replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def is_right(constant: str, answer: str | None) -> bool:
    """Whether `constant` is the item's answer: equal case and runs of spaces aside, or as a number
    (a number with its unit, "5 days", is answered by the number)."""
    if answer is None:
        return False
    said, right = " ".join(constant.split()).lower(), " ".join(answer.split()).lower()
    if said == right:
        return True
    words = right.split()
    if len(words) == 2 and words[1].isalpha():
        right = words[0]
    a, b = _number(said), _number(right)
    return a is not None and a == b


@dataclasses.dataclass
class Row:
    """One env's figures: the mean reward and the base rate of each constant."""

    name: str
    means: dict[str, float]
    rates: dict[str, float]
    error: str = ""

    @property
    def base(self) -> float:
        return max(self.rates.values(), default=0.0)

    def excess(self) -> dict[str, float]:
        return {c: self.means[c] - self.rates[c] for c in self.means}

    def paid(self) -> dict[str, float]:
        """Constants paid above their base rate, with the excess."""
        return {c: e for c, e in self.excess().items() if e > TOLERANCE}


# -- Reasoning Gym ----------------------------------------------------------------------------------------

COMPOSITE: dict[str, Any] = {
    "datasets": [
        {"name": "chain_sum", "weight": 1, "config": {}},
        {"name": "graph_color", "weight": 1, "config": {}},
    ]
}


async def reasoning_gym_row(name: str, seeds: int) -> Row:
    """Every constant on seeds 0..seeds-1 of one dataset, scored by the env's own reward methods."""
    from envhub_reasoning_gym import env_id
    from envhub_reasoning_gym.env import reference_answer

    env: Any = envhub.make(env_id(name), **(COMPOSITE if name == "composite" else {}))
    totals = dict.fromkeys(CONSTANTS, 0.0)
    right = dict.fromkeys(CONSTANTS, 0)
    for seed in range(seeds):
        await env.reset(seed=seed)
        answer = reference_answer(env.entry)
        for constant in CONSTANTS:
            reward, _ = await score(env, answer=f"<answer>{constant}</answer>", messages=[])
            totals[constant] += reward
            right[constant] += is_right(constant, answer)
    await env.close()
    return Row(name, {c: totals[c] / seeds for c in CONSTANTS}, {c: right[c] / seeds for c in CONSTANTS})


# -- first-party envs ---------------------------------------------------------------------------------------

MAX_STEPS = 300


def _answer_of(env: Any) -> str | None:
    """The item's answer, as a reply would write it, for the base rate."""
    for attribute in ("result", "secret"):
        if isinstance(getattr(type(env), attribute, None), property) or hasattr(env, attribute):
            value = getattr(env, attribute, None)
            if isinstance(value, int):
                return str(value)
    task = getattr(env, "task", None)
    if task is not None:
        for attribute in ("answer", "expected"):
            if hasattr(task, attribute):
                return str(getattr(task, attribute))
    return None


FIRST_PARTY: dict[str, dict[str, Any]] = {
    "arithmetic": {},
    "countdown": {},
    "guess-number": {},
    **{
        f"vision:{kind}": {"kind": kind}
        for kind in (
            "count-shapes",
            "bar-chart",
            "compare-images",
            "read-text",
            "locate-object",
            "read-clock",
        )
    },
    "tool-use": {},
}
"""First-party envs whose reward grades a plain reply (code and SWE grade programs, browser pages)."""


async def first_party_row(name: str, seeds: int) -> Row:
    """Every constant, replied on every turn until the episode ends, through the env's real `step`."""
    env_id = name.split(":")[0]
    env: Any = envhub.make(env_id, **FIRST_PARTY[name])
    totals = dict.fromkeys(CONSTANTS, 0.0)
    right = dict.fromkeys(CONSTANTS, 0)
    try:
        for seed in range(seeds):
            for constant in CONSTANTS:
                await env.reset(seed=seed)
                answer = _answer_of(env)
                right[constant] += is_right(constant, answer)
                for _ in range(MAX_STEPS):
                    result = await env.step(constant)
                    totals[constant] += result.reward
                    if result.terminated or result.truncated:
                        break
    finally:
        await env.close()
    return Row(name, {c: totals[c] / seeds for c in CONSTANTS}, {c: right[c] / seeds for c in CONSTANTS})


# -- the table ----------------------------------------------------------------------------------------------


def print_table(rows: list[Row], full: bool) -> None:
    headers = ["env", "base rate", "paid most above base", "excess"]
    if full:
        headers += [label(c) for c in CONSTANTS]
    print("| " + " | ".join(headers) + " |")
    print("|" + "---|" * len(headers))
    for row in rows:
        if row.error:
            print(
                f"| {row.name} | - | error: {row.error[:100]} | - |"
                + (" - |" * len(CONSTANTS) if full else "")
            )
            continue
        excess = row.excess()
        worst = max(excess, key=lambda c: excess[c])
        cells = [
            row.name,
            f"{row.base:.2f}",
            f"`{label(worst)}` {row.means[worst]:.3f}",
            f"{excess[worst]:+.3f}",
        ]
        if full:
            cells += [f"{row.means[c]:.2f}" for c in CONSTANTS]
        print("| " + " | ".join(cells) + " |", flush=True)


def summary(rows: list[Row], seconds: float) -> None:
    paid = [r for r in rows if not r.error and r.paid()]
    means = [statistics.fmean(r.excess().values()) for r in rows if not r.error]
    print(
        f"\n{len(rows)} envs x {len(CONSTANTS)} constants; mean excess over base rate "
        f"{statistics.fmean(means) if means else math.nan:.4f}; {len(paid)} envs pay some constant above its "
        f"base rate; "
        f"{sum(r.error != '' for r in rows)} errors; {seconds:.0f} s"
    )
    if paid:
        print("\npaid above base rate (env: constant mean reward vs base rate):")
        for row in paid:
            worst = sorted(row.paid().items(), key=lambda item: -item[1])[:4]
            shown = ", ".join(f"`{label(c)}` {row.means[c]:.3f} vs {row.rates[c]:.2f}" for c, _ in worst)
            print(f"- {row.name}: {shown}")


async def main(args: argparse.Namespace) -> int:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    jobs: list[tuple[str, Callable[[str, int], Any]]] = []
    if args.family in (None, "reasoning-gym"):
        from envhub_reasoning_gym import dataset_names

        jobs += [(n, reasoning_gym_row) for n in dataset_names()]
    if args.family in (None, "first-party"):
        jobs += [(n, first_party_row) for n in FIRST_PARTY]
    if args.names:
        jobs = [(n, job) for n, job in jobs if n in args.names]
    started = time.monotonic()
    rows: list[Row] = []
    for name, job in jobs:
        try:
            rows.append(await job(name, args.seeds))
        except Exception as exc:  # an env that cannot run here (no sandbox) is a row, not the end
            rows.append(Row(name, {}, {}, error=f"{type(exc).__name__}: {exc}"))
    print_table(rows, args.full)
    summary(rows, time.monotonic() - started)
    return int(any(not r.error and r.paid() for r in rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only these datasets or envs")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--family", choices=["reasoning-gym", "first-party"])
    parser.add_argument("--full", action="store_true", help="print every constant's mean reward")
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(asyncio.run(main(parser.parse_args())))
