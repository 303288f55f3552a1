"""Browser benchmark: Chromium launch time, per-step latency, and oracle episodes/s at concurrency 1 and 4.

python benchmarks/browser.py [--launches N] [--steps N] [--episodes N]

Compares, side by side: a step with and without the screenshot, and one env worker against four (each with
its own Chromium) on the same machine. Episodes mix all web tasks and are played by the oracle, so they
measure the environment, not a model.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from envhub_browser import WebTasks
from envhub_browser.browser import launch
from playwright.async_api import async_playwright
from rich.console import Console
from rich.table import Table

from envhub.core import recorded_action
from envhub.policies import OraclePolicy
from envhub.policies.base import Generation
from envhub.rollout import RolloutLimits, run_batch


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def launch_times(count: int) -> list[float]:
    """Seconds from nothing to a browser with an open page: the driver, Chromium, a context and a tab."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        playwright = await async_playwright().start()
        browser, _ = await launch(playwright)
        page = await browser.new_page()
        times.append(time.perf_counter() - started)
        await page.close()
        await browser.close()
        await playwright.stop()
    return times


async def step_times(steps: int, *, screenshot: bool) -> list[float]:
    """Seconds per oracle step (action, settle, text view, screenshot) over whole episodes of mixed tasks."""
    times: list[float] = []
    policy = OraclePolicy()
    async with WebTasks(screenshot=screenshot) as env:
        seed = 0
        while len(times) < steps:
            observation, _ = await env.reset(seed=seed)
            player = policy.for_episode(env)
            messages = list(observation)
            done = False
            while not done:
                action = await player.act(messages, env.tools)
                assert not isinstance(action, Generation)  # the oracle returns plain actions
                started = time.perf_counter()
                result = await env.step(action)
                times.append(time.perf_counter() - started)
                messages += [recorded_action(action), *result.observation]
                done = result.terminated or result.truncated
            seed += 1
    return times[:steps]


async def throughput(episodes: int, concurrency: int) -> tuple[float, float]:
    """Oracle episodes per second over mixed tasks, and the mean reward (should be 1.0)."""
    limits = RolloutLimits(concurrency=concurrency)
    batch = await run_batch("web-tasks", OraclePolicy(), episodes=episodes, seed=0, limits=limits)
    mean = statistics.fmean(e.reward for e in batch.episodes)
    return episodes / batch.wall_seconds, mean


async def main(args: argparse.Namespace) -> None:
    console = Console()
    launches = await launch_times(args.launches)
    with_shot = await step_times(args.steps, screenshot=True)
    without_shot = await step_times(args.steps, screenshot=False)
    rates = {c: await throughput(args.episodes, c) for c in (1, 4)}

    table = Table(title="envhub-browser: headless Chromium via Playwright")
    table.add_column("metric")
    table.add_column("p50", justify="right")
    table.add_column("p99", justify="right")
    table.add_row(f"launch: driver + Chromium + tab ({len(launches)} runs)", *(
        f"{percentile(launches, q) * 1000:.0f} ms" for q in (0.5, 0.99)
    ))  # fmt: skip
    for label, times in (("step, text view + screenshot", with_shot), ("step, text view only", without_shot)):
        table.add_row(
            f"{label} ({len(times)} steps)", *(f"{percentile(times, q) * 1000:.0f} ms" for q in (0.5, 0.99))
        )
    console.print(table)

    rate_table = Table(
        title=f"oracle episodes over all tasks ({args.episodes} per row, one Chromium per worker)"
    )
    rate_table.add_column("concurrency", justify="right")
    rate_table.add_column("episodes / s", justify="right")
    rate_table.add_column("mean reward", justify="right")
    for concurrency, (rate, mean) in rates.items():
        rate_table.add_row(str(concurrency), f"{rate:.2f}", f"{mean:.2f}")
    console.print(rate_table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=60)
    asyncio.run(main(parser.parse_args()))
