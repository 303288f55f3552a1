"""Desktop benchmark: a fresh desktop against a reset with a spare ready, one step, two screenshot routes.

python benchmarks/desktop.py [--runs N] [--steps N] [--tasks NAME,...] [--launches N]

Prints one table row per task (by default the first task of each application family) and the machine's
load average before and after, since the figures move with it.

- fresh: what a reset costs with no spare (`DesktopEnv(spare=False)`): sandbox + Xvfb + openbox + the
  app's window (LibreOffice with its prepared profile copied in), and the screen still (0.5 s; 2 s for
  LibreOffice, `Task.first_screen_quiet`).
- spare: `DesktopEnv` reset when the previous episode's background start has finished (and 3 s more,
  as a short episode takes): files + the app + the screen still (`Desktop.wait_still`).
- step: one tool call (a key press) and the observation after it (window list + PNG screenshot),
  with the env's settle pause (0.2 s by default) reported apart.
- screenshot routes: the host reading Xvfb's -fbdir XWD file and encoding PNG, against running
  `xwd` in the sandbox (then reading its file), against `xwd | xwdtopnm | pnmtopng` in the sandbox
  (these two need Debian's x11-apps and netpbm, which the env itself does not).
- launches (`--launches N`): N fresh desktops with Mousepad, two at a time, counting the windows that had
  to be mapped again (`Desktop.remaps`) and the launches that failed anyway.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from envhub_desktop.actions import Keys
from envhub_desktop.desktop import Backend, Desktop
from envhub_desktop.env import DesktopEnv
from envhub_desktop.office import built_profile
from envhub_desktop.tasks import FAMILIES, TASKS
from rich.console import Console
from rich.table import Table

from envhub.messages import Message, ToolCall


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    middle, top = statistics.median(ordered) * 1000, ordered[-1] * 1000
    return f"median {middle:7.1f} ms  max {top:7.1f} ms  (n={len(ordered)})"


def cell(values: list[float]) -> str:
    """Median and max in milliseconds, for a table cell."""
    ordered = sorted(values)
    return f"{statistics.median(ordered) * 1000:.0f} / {ordered[-1] * 1000:.0f}"


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


BACKEND: Backend = "local"
"""Where the desktops run (`--backend`)."""


async def fresh(task: str, runs: int) -> list[float]:
    """`DesktopEnv(spare=False)` resets: a new desktop each time, LibreOffice's prepared profile copied in
    (built once per process, before the clock starts: `profile build` below), the task's still-screen
    wait; the last episode's desktop is closed first, as in the spare run."""
    env = DesktopEnv(task=task, spare=False, settle=0.0, backend=BACKEND)
    times = []
    try:
        for seed in range(runs):
            begun = time.monotonic()
            await env.reset(seed=seed)
            times.append(time.monotonic() - begun)
    finally:
        await env.close()
    return times


async def with_spare(task: str, runs: int, steps: int) -> tuple[list[float], list[float]]:
    env = DesktopEnv(task=task, spare=True, settle=0.0, backend=BACKEND)
    resets, step_times = [], []
    try:
        await env.reset(seed=0)
        for seed in range(1, runs + 1):
            assert env._next is not None
            await asyncio.wait([env._next])
            await asyncio.sleep(3)  # as during an episode of a few turns
            begun = time.monotonic()
            await env.reset(seed=seed)
            resets.append(time.monotonic() - begun)
            assert env.used_spare
            for i in range(steps):
                action = Message(
                    role="assistant", tool_calls=[ToolCall.create("key", {"keys": "Right"}, id=f"c{i}")]
                )
                begun = time.monotonic()
                await env.step(action)
                step_times.append(time.monotonic() - begun)
    finally:
        await env.close()
    return resets, step_times


async def screenshot_routes(runs: int) -> dict[str, list[float]]:
    routes: dict[str, list[float]] = {
        name: []
        for name in ("host reads -fbdir file + PNG", "xwd in sandbox + read", "xwd|pnmtopng in sandbox")
    }
    async with Desktop() as desktop:
        await desktop.launch(["mousepad"], window="Mousepad")
        for _ in range(runs):
            begun = time.monotonic()
            await desktop.screenshot()
            routes["host reads -fbdir file + PNG"].append(time.monotonic() - begun)
            begun = time.monotonic()
            await desktop.sb.exec("xwd -root -silent -out /tmp/shot.xwd")
            await desktop.sb.read_file("/tmp/shot.xwd")
            routes["xwd in sandbox + read"].append(time.monotonic() - begun)
            begun = time.monotonic()
            await desktop.sb.exec("xwd -root -silent | xwdtopnm 2>/dev/null | pnmtopng > /tmp/shot.png")
            await desktop.sb.read_file("/tmp/shot.png")
            routes["xwd|pnmtopng in sandbox"].append(time.monotonic() - begun)
            await desktop.act(Keys(("Right",)))
    return routes


async def launch_twice(seed: int) -> tuple[int, int]:
    """(remaps, failures) of one pair of desktops started at once."""

    async def one() -> tuple[int, int]:
        async with Desktop() as desktop:
            await desktop.sb.write_file("notes.txt", f"seed {seed}\n")
            try:
                await desktop.launch(["mousepad", "/work/notes.txt"], window="notes.txt", within=30)
            except Exception:
                return desktop.remaps, 1
            return desktop.remaps, 0

    pairs = await asyncio.gather(one(), one())
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


async def main(runs: int, steps: int, launches: int, tasks: list[str]) -> None:
    if launches:
        counts = [await launch_twice(i) for i in range(launches // 2)]
        remaps, failures = sum(c[0] for c in counts), sum(c[1] for c in counts)
        print(f"launches: {2 * len(counts)}, remapped {remaps}, failed {failures}")
        return
    console = Console(width=130)
    console.print(f"load average before: {load()}")
    begun = time.monotonic()
    await built_profile(BACKEND)
    console.print(f"LibreOffice profile build, once per process: {(time.monotonic() - begun) * 1000:.1f} ms")
    table = Table(
        title=f"desktop reset and step on {BACKEND}, ms (median / max; {runs} resets, {runs * steps} steps)"
    )
    for column in ("task", "app", "fresh start", "spare reset", "spare / fresh", "step"):
        table.add_column(column, justify="left" if column in ("task", "app") else "right")
    for task in tasks:
        started = await fresh(task, runs)
        resets, step_times = await with_spare(task, runs, steps)
        ratio = statistics.median(resets) / statistics.median(started)
        table.add_row(task, TASKS[task].app, cell(started), cell(resets), f"{ratio:.2f}x", cell(step_times))
    console.print(table)
    console.print("step = one key press + the window list + a PNG screenshot, with settle=0")
    for name, times in (await screenshot_routes(runs * steps)).items():
        console.print(f"screenshot: {name:30s} {summary(times)}")
    console.print(f"load average after: {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--launches", type=int, default=0, help="only count remaps over N app launches")
    parser.add_argument(
        "--tasks",
        default=",".join(family[0].name for family in FAMILIES.values() if family),
        help="comma-separated task names (default: the first task of each application family)",
    )
    parser.add_argument("--backend", choices=("local", "docker"), default="local")
    args = parser.parse_args()
    BACKEND = "docker" if args.backend == "docker" else "local"
    names = [name for name in args.tasks.split(",") if name]
    unknown = sorted(set(names) - set(TASKS))
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    asyncio.run(main(args.runs, args.steps, args.launches, names))
