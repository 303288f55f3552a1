"""Check a dataset against its own grader: each gold patch must resolve, and an empty patch must not."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from envhub_swe.data import Instance
from envhub_swe.evaluation import GradeReport, cut_test_output
from envhub_swe.runtime import DEFAULT_TIMEOUT_S, RuntimeKind, grade, mini_runtime, mini_workspace


class Validation(BaseModel):
    model_config = ConfigDict(frozen=True)

    instance_id: str
    gold_resolved: bool
    empty_resolved: bool
    gold_summary: str
    empty_summary: str
    duration_s: float
    gold_canary: str = ""
    empty_canary: str = ""
    gold_cause: str = ""
    """Why gold did not resolve, first cause first (see `first_cause`); empty when it resolved."""
    gold: GradeReport | None = None
    empty: GradeReport | None = None

    @property
    def canary(self) -> str:
        """Both runs' canaries: `passed`, `void: canary` if either was tampered with, or why none ran."""
        outcomes = {self.gold_canary, self.empty_canary}
        if "void" in outcomes:
            return "void: canary"
        return self.gold_canary if len(outcomes) == 1 else f"{self.gold_canary} / {self.empty_canary}"

    @property
    def ok(self) -> bool:
        return self.gold_resolved and not self.empty_resolved

    @property
    def note(self) -> str:
        """What the table says of an invalid instance: gold's first cause, or empty's summary."""
        if self.ok:
            return ""
        if not self.gold_resolved:
            return self.gold_cause or self.gold_summary
        return f"empty patch resolves: {self.empty_summary}"


_CAUSES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^(?:\S+: )?(?:line \d+: )?(\S+): command not found$", re.M), "command not found: {0}"),
    (re.compile(r"^(?:\S+: )?(?:line \d+: )?(\S+): No such file or directory$", re.M), "not found: {0}"),
    (re.compile(r"^(?:E\s+)?(ModuleNotFoundError: No module named \S+)", re.M), "{0}"),
    (re.compile(r"^(?:E\s+)?(ImportError: .+)$", re.M), "{0}"),
    (re.compile(r"^(?:E\s+)?(SyntaxError: .+)$", re.M), "{0}"),
    (re.compile(r"^(ERROR: (?:usage|file or directory not found|not found): .+)$", re.M), "pytest: {0}"),
    (re.compile(r"^(error: patch failed: .+|error: .+: patch does not apply)$", re.M), "test patch: {0}"),
]
"""Log lines that say why tests could not run, in the order they are looked for."""


def first_cause(report: GradeReport, log: str | None = None) -> str:
    """The first reason a report did not resolve, for a person to act on: a missing command, an import
    error, a timeout, why the log was void, or which listed tests failed or were missing."""
    whole = report.log if log is None else log
    text = cut_test_output(whole) or whole  # the setup's own noise (e.g. `locale-gen`) is not the cause
    problem = report.problem or ""
    if "timed out" in problem or "out of memory" in problem:
        return problem
    for pattern, template in _CAUSES:
        found = pattern.search(text)
        if found:
            return template.format(found[1].strip())[:200]
    if problem:
        return f"void: {problem}"[:200]
    for kind, outcome in (("FAIL_TO_PASS", report.fail_to_pass), ("PASS_TO_PASS", report.pass_to_pass)):
        if outcome.failed:
            return f"{kind} failed: {outcome.failed[0]}" + (
                f" (+{len(outcome.failed) - 1} more)" if len(outcome.failed) > 1 else ""
            )
        if outcome.missing:
            return f"{kind} missing from the log: {outcome.missing[0]}" + (
                f" (+{len(outcome.missing) - 1} more)" if len(outcome.missing) > 1 else ""
            )
    return "" if report.resolved else report.summary()


def log_writer(directory: Path | None, instance_id: str, which: str) -> Callable[[str], None] | None:
    """The `on_log` callback that keeps a run's whole log as DIR/ID.WHICH.log (None: keep nothing)."""
    if directory is None:
        return None

    folder = directory.expanduser().resolve()

    def write(log: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{instance_id}.{which}.log").write_text(log, errors="surrogateescape")

    return write


async def validate(
    instances: Sequence[Instance],
    *,
    dataset: str = "swe-mini",
    runtime: RuntimeKind = "local",
    workspaces: str | Path | None = None,
    concurrency: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    keep_logs: Path | None = None,
    on_done: Callable[[Validation], None] | None = None,
) -> list[Validation]:
    """Grade the gold and the empty patch of every instance, `concurrency` instances at a time.

    `timeout_s` bounds each command of a grade (the tests included); `keep_logs` is a folder that gets
    each run's whole log (the report keeps only its tail)."""
    from envhub_swe.prepare import prepared

    gate = asyncio.Semaphore(concurrency)

    async def one(instance: Instance) -> Validation:
        async with gate:
            ws: Path | None
            if dataset == "swe-mini":
                rt = mini_runtime(runtime, timeout_s=timeout_s)
                ws = await asyncio.to_thread(mini_workspace, instance)
            else:
                root = Path(workspaces) if workspaces else None
                rt, ws = await asyncio.to_thread(prepared, instance, root, runtime, timeout_s=timeout_s)
            full: dict[str, str] = {}

            def keep(which: str) -> Callable[[str], None]:
                kept = log_writer(keep_logs, instance.instance_id, which)

                def on_log(log: str) -> None:
                    full[which] = log
                    if kept is not None:
                        kept(log)

                return on_log

            gold = await grade(instance, instance.patch, rt, ws, on_log=keep("gold"))
            empty = await grade(instance, "", rt, ws, on_log=keep("empty"))
            result = Validation(
                instance_id=instance.instance_id,
                gold_resolved=gold.resolved,
                empty_resolved=empty.resolved,
                gold_summary=gold.summary(),
                empty_summary=empty.summary(),
                duration_s=round(gold.duration_s + empty.duration_s, 2),
                gold_canary=gold.canary,
                empty_canary=empty.canary,
                gold_cause="" if gold.resolved else first_cause(gold, full.get("gold")),
                gold=gold,
                empty=empty,
            )
            if on_done is not None:
                on_done(result)
            return result

    return list(await asyncio.gather(*(one(i) for i in instances)))
