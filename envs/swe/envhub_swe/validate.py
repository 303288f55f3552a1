"""Check a dataset against its own grader: each gold patch must resolve, and an empty patch must not.

Gold and empty are graded at once where the cores allow (`together`); each grade's verdict is appended
to a results file the moment it is reached (`VerdictStore`), and a grade the machinery lost (a sandbox
gone mid-run, an infrastructure error) is retried, then reported for its instance alone: the others'
verdicts, and the same instance's other grade, are kept.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from envhub.core import InfrastructureError
from envhub_swe.data import Instance
from envhub_swe.evaluation import GradeReport, cut_test_output
from envhub_swe.runtime import DEFAULT_TIMEOUT_S, Runtime, RuntimeKind, grade, mini_runtime, mini_workspace

Which = Literal["gold", "empty"]
RETRIED: tuple[type[BaseException], ...] = (InfrastructureError, OSError)
"""What a lost sandbox raises (a scratch area removed under it surfaces as FileNotFoundError): retried.
validate grades the dataset's own patches, so no such failure is the submission's doing."""


class RunVerdict(BaseModel):
    """One grade (gold or empty) of one instance, as the results file stores it when it is reached."""

    model_config = ConfigDict(frozen=True)

    dataset: str
    runtime: str
    instance_id: str
    which: Which
    resolved: bool = False
    summary: str = ""
    canary: str = ""
    cause: str = ""
    """Why it did not resolve, first cause first (see `first_cause`); empty when it resolved."""
    duration_s: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    """Wall-clock (epoch) seconds: when the grade began (its first attempt) and when it was reached."""
    attempts: int = 1
    retried_after: str = ""
    """The failure that made an earlier attempt be retried, if one was."""
    error: str = ""
    """Why no verdict was reached (infrastructure, after every attempt; or the instance cannot run here)."""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.dataset, self.runtime, self.instance_id, self.which)


class VerdictStore:
    """A JSON-lines results file: one line per grade, appended and flushed as each is reached, so an
    interrupted run loses only the grades in flight. `resume` reuses the verdicts already there
    (errors are graded again). Hand-written: a few lines of JSON, nothing a library would add."""

    def __init__(self, path: Path, *, resume: bool = False) -> None:
        self.path = path.expanduser().resolve()
        self.reached: dict[tuple[str, str, str, str], RunVerdict] = self._read() if resume else {}
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _read(self) -> dict[tuple[str, str, str, str], RunVerdict]:
        if not self.path.exists():
            return {}
        found: dict[tuple[str, str, str, str], RunVerdict] = {}
        for line in self.path.read_text().splitlines():
            try:
                verdict = RunVerdict.model_validate_json(line)
            except ValidationError:  # a line an interrupted write cut short
                continue
            if not verdict.error:
                found[verdict.key] = verdict
        return found

    def get(self, key: tuple[str, str, str, str]) -> RunVerdict | None:
        return self.reached.get(key)

    def add(self, verdict: RunVerdict) -> None:
        with self.path.open("a") as out:
            out.write(verdict.model_dump_json() + "\n")
            out.flush()
            os.fsync(out.fileno())


def default_together(concurrency: int, count: int) -> bool:
    """Gold and empty at once when every grade in flight gets a core of its own (a sandbox is held to
    one CPU): a run then takes about one grade's time instead of two."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores >= 2 * max(1, min(concurrency, count))


class Validation(BaseModel):
    model_config = ConfigDict(frozen=True)

    instance_id: str
    gold_resolved: bool
    empty_resolved: bool
    gold_summary: str
    empty_summary: str
    duration_s: float
    """Both grades' own durations, added: what grading cost, whether or not they ran at once."""
    wall_s: float = 0.0
    """From the first grade's start to the last one's verdict (less than `duration_s` when together)."""
    gold_canary: str = ""
    empty_canary: str = ""
    gold_cause: str = ""
    """Why gold did not resolve, first cause first (see `first_cause`); empty when it resolved."""
    gold: GradeReport | None = None
    empty: GradeReport | None = None
    """The whole reports (None for a grade reused from the results file or not reached)."""
    gold_error: str = ""
    empty_error: str = ""
    """Why that grade reached no verdict (see `RunVerdict.error`): the instance is reported, not valid."""
    retried: str = ""
    """A failure an attempt was retried after, for the note (the verdicts stand)."""
    reused: bool = False
    """Both verdicts came from the results file (`--resume`), not from grading now."""

    @classmethod
    def of(
        cls, gold: RunVerdict, empty: RunVerdict, reports: dict[str, GradeReport] | None = None
    ) -> Validation:
        reports = reports or {}
        return cls(
            instance_id=gold.instance_id,
            gold_resolved=gold.resolved,
            empty_resolved=empty.resolved,
            gold_summary=gold.summary,
            empty_summary=empty.summary,
            duration_s=round(gold.duration_s + empty.duration_s, 2),
            wall_s=round(
                max(gold.finished_at, empty.finished_at) - min(gold.started_at, empty.started_at), 2
            ),
            gold_canary=gold.canary,
            empty_canary=empty.canary,
            gold_cause=gold.cause,
            gold=reports.get("gold"),
            empty=reports.get("empty"),
            gold_error=gold.error,
            empty_error=empty.error,
            retried=gold.retried_after or empty.retried_after,
            reused="gold" not in reports and "empty" not in reports and not (gold.error or empty.error),
        )

    @property
    def errors(self) -> list[str]:
        """Each grade that reached no verdict, and why (once, when both failed alike)."""
        if self.gold_error and self.gold_error == self.empty_error:
            return [f"not graded: {self.gold_error}"]
        return [
            f"{w} not graded: {e}" for w, e in (("gold", self.gold_error), ("empty", self.empty_error)) if e
        ]

    @property
    def canary(self) -> str:
        """Both runs' canaries: `passed`, `void: canary` if either was tampered with, or why none ran."""
        outcomes = {self.gold_canary, self.empty_canary}
        if "void" in outcomes:
            return "void: canary"
        return self.gold_canary if len(outcomes) == 1 else f"{self.gold_canary} / {self.empty_canary}"

    @property
    def ok(self) -> bool:
        return self.gold_resolved and not self.empty_resolved and not self.errors

    @property
    def note(self) -> str:
        """What the table says of an instance: why a grade reached no verdict, gold's first cause, or
        empty's summary; of a valid one, a retry it needed or that its verdicts were reused."""
        if self.errors:
            return "; ".join(self.errors)
        if self.ok:
            if self.retried:
                return f"retried after: {self.retried}"
            return "from the results file" if self.reused else ""
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


def _failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


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
    together: bool | None = None,
    retries: int = 1,
    results: VerdictStore | None = None,
    on_verdict: Callable[[RunVerdict], None] | None = None,
) -> list[Validation]:
    """Grade the gold and the empty patch of every instance, `concurrency` instances at a time.

    `timeout_s` bounds each command of a grade (the tests included); `keep_logs` is a folder that gets
    each run's whole log (the report keeps only its tail). `together` grades an instance's gold and
    empty at once (None: where `default_together` says the cores allow). A grade that raises one of
    `RETRIED` is tried again up to `retries` times in a fresh sandbox; one that still fails, or any other
    failure (an instance that cannot run here), is that grade's `error`, and the rest go on. `results`
    stores every verdict when it is reached and supplies those a resumed run reuses."""
    grading = _Grading(
        dataset=dataset,
        runtime=runtime,
        workspaces=workspaces,
        timeout_s=timeout_s,
        keep_logs=keep_logs,
        on_done=on_done,
        together=default_together(concurrency, len(instances)) if together is None else together,
        retries=retries,
        results=results,
        on_verdict=on_verdict,
        gate=asyncio.Semaphore(concurrency),
    )
    return list(await asyncio.gather(*(grading.one(i) for i in instances)))


@dataclass
class _Grading:
    """One `validate` call's options, and the grading of one instance under them."""

    dataset: str
    runtime: RuntimeKind
    workspaces: str | Path | None
    timeout_s: float
    keep_logs: Path | None
    on_done: Callable[[Validation], None] | None
    together: bool
    retries: int
    results: VerdictStore | None
    on_verdict: Callable[[RunVerdict], None] | None
    gate: asyncio.Semaphore

    async def one(self, instance: Instance) -> Validation:
        """Gold and empty of one instance, each reused from `results` where stored, else graded."""
        async with self.gate:
            reports: dict[str, GradeReport] = {}
            full: dict[str, str] = {}
            key = (self.dataset, self.runtime, instance.instance_id)
            stored = {
                w: self.results.get((*key, w)) if self.results is not None else None
                for w in ("gold", "empty")
            }
            setup: tuple[Runtime, Path | None] | None = None
            setup_error = ""
            if not all(stored.values()):
                setup, setup_error = await self._setup(instance)

            async def run(which: Which, patch: str) -> RunVerdict:
                reused = stored[which]
                if reused is not None:
                    return reused
                return await self._run(instance, which, patch, setup, setup_error, reports, full)

            if self.together:
                gold, empty = await asyncio.gather(run("gold", instance.patch), run("empty", ""))
            else:
                gold = await run("gold", instance.patch)
                empty = await run("empty", "")
            result = Validation.of(gold, empty, reports)
            if self.on_done is not None:
                self.on_done(result)
            return result

    async def _setup(self, instance: Instance) -> tuple[tuple[Runtime, Path | None] | None, str]:
        """The runtime and workspace to grade the instance in, or why there is none here."""
        from envhub_swe.prepare import Unsupported, prepared

        try:
            if self.dataset == "swe-mini":
                rt = mini_runtime(self.runtime, timeout_s=self.timeout_s)
                return (rt, await asyncio.to_thread(mini_workspace, instance)), ""
            root = Path(self.workspaces) if self.workspaces else None
            return await asyncio.to_thread(
                prepared, instance, root, self.runtime, timeout_s=self.timeout_s
            ), ""
        except Unsupported as exc:  # cannot run here: its message says what to do
            return None, str(exc)
        except Exception as exc:  # e.g. building swe-mini's workspace failed
            return None, _failure(exc)

    def _keep(self, instance: Instance, which: str, full: dict[str, str]) -> Callable[[str], None]:
        """Where a grade's whole log goes: `full` (for the cause of a failure) and `keep_logs`."""
        kept = log_writer(self.keep_logs, instance.instance_id, which)

        def on_log(log: str) -> None:
            full[which] = log
            if kept is not None:
                kept(log)

        return on_log

    async def _run(
        self,
        instance: Instance,
        which: Which,
        patch: str,
        setup: tuple[Runtime, Path | None] | None,
        setup_error: str,
        reports: dict[str, GradeReport],
        full: dict[str, str],
    ) -> RunVerdict:
        """Grade one patch, retrying what the machinery lost; store and announce its verdict."""
        base = {"dataset": self.dataset, "runtime": self.runtime, "instance_id": instance.instance_id}
        started, attempts, retried_after = time.time(), 0, ""
        report: GradeReport | None = None
        error = setup_error
        while setup is not None and report is None:
            attempts += 1
            try:
                report = await grade(instance, patch, *setup, on_log=self._keep(instance, which, full))
            except RETRIED as exc:
                if attempts > self.retries:
                    tried = f"{attempts} attempt" + ("s" if attempts > 1 else "")
                    error = f"{_failure(exc)} (infrastructure; {tried})"
                    break
                retried_after = _failure(exc)
            except Exception as exc:  # not the machinery's: reported at once, never retried
                error = _failure(exc)
                break
        verdict = RunVerdict(
            **base,
            which=which,
            started_at=started,
            finished_at=time.time(),
            attempts=max(attempts, 1),
            retried_after=retried_after,
            error=error if report is None else "",
        )
        if report is not None:
            reports[which] = report
            verdict = verdict.model_copy(
                update={
                    "resolved": report.resolved,
                    "summary": report.summary(),
                    "canary": report.canary,
                    "cause": "" if report.resolved else first_cause(report, full.get(which)),
                    "duration_s": report.duration_s,
                }
            )
        if self.results is not None:
            self.results.add(verdict)
        if self.on_verdict is not None:
            self.on_verdict(verdict)
        return verdict
