"""What the SWE test-process guard costs a graded run, against the same run without it.

Two measures, interleaved (guard on, guard off, on, off, ...) so that a busy host slows both alike:

- **grade**: `envhub_swe.runtime.grade` of each swe-mini instance's gold patch, whole (fresh sandbox,
  workspace, patch, tests, report);
- **test command**: the instance's test command alone, run in one sandbox with and without the guard's
  folder first on PYTHONPATH: the part the guard can slow down.

    python benchmarks/swe_guard_overhead.py --repeats 3 [--runtime local|docker] [-i mini__stats-1 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from envhub_swe.data import load_mini
from envhub_swe.evaluation import adapt_eval_script
from envhub_swe.runtime import grade, mini_runtime, mini_workspace, open_workspace
from envhub_swe.tamper_guard import GuardRun
from rich.console import Console
from rich.progress import track
from rich.table import Table


async def _test_command_seconds(
    instance_id: str, runtime_kind: str, repeats: int
) -> tuple[list[float], list[float]]:
    instance = next(i for i in load_mini() if i.instance_id == instance_id)
    runtime = mini_runtime(runtime_kind)  # type: ignore[arg-type]
    steps = adapt_eval_script(instance.eval_script, activation=runtime.activation, skip_install=True)
    on: list[float] = []
    off: list[float] = []
    async with await runtime.open(guard=True) as sandbox:
        await open_workspace(sandbox, mini_workspace(instance), instance.base_commit)
        await sandbox.exec(["/bin/bash", "-c", "exec 2>&1; bash -s"], stdin=steps.setup, timeout=300)
        for _ in range(repeats):
            for guarded in (True, False):
                watch = GuardRun(submission=(), tests=())
                await sandbox.write_file(watch.config_path, watch.config())
                lines = [*watch.shell_lines(), steps.test_command] if guarded else [steps.test_command]
                started = time.perf_counter()
                await sandbox.exec(["/bin/bash", "-c", steps.test_script("\n".join(lines))])
                (on if guarded else off).append(time.perf_counter() - started)
    return on, off


async def _grade_seconds(
    instance_id: str, runtime_kind: str, repeats: int
) -> tuple[list[float], list[float]]:
    instance = next(i for i in load_mini() if i.instance_id == instance_id)
    runtime = mini_runtime(runtime_kind)  # type: ignore[arg-type]
    workspace = mini_workspace(instance)
    on: list[float] = []
    off: list[float] = []
    for _ in range(repeats):
        for guarded in (True, False):
            report = await grade(instance, instance.patch, runtime, workspace, guarded=guarded)
            assert report.resolved, report.summary()
            (on if guarded else off).append(report.duration_s)
    return on, off


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runtime", default="local", choices=["local", "docker"])
    parser.add_argument("-i", "--instances", nargs="*", default=["mini__stats-1", "mini__kvstore-1"])
    args = parser.parse_args()
    console = Console()
    table = Table(title=f"SWE test-process guard, {args.runtime} runtime, load {os.getloadavg()[0]:.2f}")
    for column in ("instance", "measure", "with guard s (median)", "without s (median)", "overhead"):
        table.add_column(column, justify="left" if column in ("instance", "measure") else "right")
    for instance_id in track(args.instances, description="measuring", console=console):
        for measure, run in (("test command", _test_command_seconds), ("grade", _grade_seconds)):
            on, off = asyncio.run(run(instance_id, args.runtime, args.repeats))
            a, b = statistics.median(on), statistics.median(off)
            table.add_row(instance_id, measure, f"{a:.3f}", f"{b:.3f}", f"{a - b:+.3f} s ({a / b:.2f}x)")
    console.print(table)


if __name__ == "__main__":
    main()
