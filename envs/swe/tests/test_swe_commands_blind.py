"""`envhub swe validate` and `prepare` as a user runs them blind (issue 31, item 12): errors that name the
dataset read and the fix, a clone of another project named as such, gold and empty graded at once, each
verdict stored when it is reached, and a sandbox lost mid-validate retried or reported for its instance
alone. Real parts: SWE-bench Lite's rows, git clones of swe-mini's bundles, bubblewrap sandboxes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import swe_fixture
from envhub_swe.data import ENV_VAR, MINI_DATA
from test_swe_data import LITE, needs_lite
from typer.testing import CliRunner

from envhub.cli import app
from envhub.sandbox.scratch import SCRATCH_PREFIX

if TYPE_CHECKING:
    from envhub_swe.validate import RunVerdict


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["swe", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback is what a user must never get
    return result.exit_code, " ".join(result.output.split())  # rich wraps at the terminal's width


def _verdicts(path: Path) -> list[RunVerdict]:
    from envhub_swe.validate import RunVerdict

    return [RunVerdict.model_validate(json.loads(line)) for line in path.read_text().splitlines()]


# -- errors that name the dataset and the fix ---------------------------------------------------------


@needs_lite
def test_a_lite_id_without_dataset_names_the_dataset_read_and_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_VAR, str(LITE))
    code, out = _run("validate", "-i", "sympy__sympy-18057")
    assert code == 2
    assert "unknown instance ids in swe-mini" in out and "12 rows" in out
    assert "sympy__sympy-18057 is in swe-bench-lite's test split: pass --dataset swe-bench-lite" in out
    code, out = _run(
        "validate", "--dataset", "swe-bench-lite", "-i", "django__django-1091", "-i", "mini__stats-2"
    )
    assert code == 2 and str(LITE / "test.parquet") in out and "300 rows" in out
    assert "django__django-1091: did you mean django__django-10914?" in out
    assert "mini__stats-2 is in swe-mini: pass --dataset swe-mini" in out
    where = swe_fixture.open_folder()
    code, out = _run(
        "prepare", "--instance", "mini__kvstore-1", "--repo", str(where), "--root", str(where / "ws")
    )
    assert code == 2 and "mini__kvstore-1 is in swe-mini: pass --dataset swe-mini" in out
    shutil.rmtree(where)


def test_without_lite_here_the_hint_says_how_to_point_at_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    code, out = _run("validate", "-i", "sympy__sympy-18057")
    assert code == 2 and "unknown instance ids in swe-mini" in out
    assert "--dataset swe-bench-lite" in out and "--data FOLDER" in out and ENV_VAR in out


# -- a wrong repository named as such -------------------------------------------------------------------


@pytest.fixture
def clones() -> Iterator[Path]:
    """A full and a shallow clone of swe-mini's kvstore (two commits; its rows' base is the first)."""
    where = swe_fixture.open_folder()
    full, shallow = where / "kvstore", where / "kvstore-shallow"
    subprocess.run(["git", "clone", "-q", str(MINI_DATA / "kvstore.bundle"), str(full)], check=True)
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{full}", str(shallow)], check=True)
    yield where
    shutil.rmtree(where)


@needs_lite
def test_prepare_names_a_clone_of_another_project(monkeypatch: pytest.MonkeyPatch, clones: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(LITE))
    repo = clones / "kvstore"
    code, out = _run(
        "prepare", "--instance", "pallets__flask-4045", "--repo", str(repo), "--root", str(clones / "ws")
    )
    assert code == 3, out
    assert f"{repo} is not a clone of pallets/flask" in out and "https://github.com/pallets/flask" in out
    assert "unshallow" not in out
    assert not (clones / "ws" / "pallets__flask-4045").exists()


def test_prepare_still_says_unshallow_for_a_shallow_clone_of_the_right_project(clones: Path) -> None:
    shallow = clones / "kvstore-shallow"
    code, out = _run(
        "prepare", "--dataset", "swe-mini", "--instance", "mini__kvstore-1", "--repo", str(shallow),
        "--root", str(clones / "ws"),
    )  # fmt: skip
    assert code == 3 and "a shallow clone of mini/kvstore" in out and "fetch --unshallow" in out


# -- gold and empty at once; each verdict stored as it is reached ---------------------------------------


def _overlap(gold: RunVerdict, empty: RunVerdict) -> bool:
    return gold.started_at < empty.finished_at and empty.started_at < gold.finished_at


def test_gold_and_empty_are_graded_at_once_and_stored_as_reached() -> None:
    where = swe_fixture.open_folder()
    try:
        together = where / "together.jsonl"
        code, out = _run("validate", "-i", "mini__stats-2", "--together", "--results", str(together))
        assert code == 0 and "1/1 valid" in out and "at once" in out, out
        gold, empty = sorted(_verdicts(together), key=lambda v: v.which != "gold")
        assert (gold.which, gold.resolved, empty.which, empty.resolved) == ("gold", True, "empty", False)
        assert _overlap(gold, empty)  # both sandboxes were open at the same time
        serial = where / "serial.jsonl"
        code, out = _run("validate", "-i", "mini__stats-2", "--one-by-one", "--results", str(serial))
        assert code == 0 and "one after the other" in out, out
        gold, empty = _verdicts(serial)
        assert gold.which == "gold" and not _overlap(gold, empty)
        # A results file is never overwritten; --resume reuses its verdicts and grades only the rest.
        code, out = _run("validate", "-i", "mini__stats-2", "--results", str(serial))
        assert code == 2 and "--resume" in out
        code, out = _run(
            "validate", "-i", "mini__stats-2", "-i", "mini__semver-1", "--results", str(serial), "--resume"
        )
        assert code == 0 and "2/2 valid" in out and "from the results file" in out, out
        graded_now = sorted((v.instance_id, v.which) for v in _verdicts(serial)[2:])
        assert graded_now == [("mini__semver-1", "empty"), ("mini__semver-1", "gold")]
    finally:
        shutil.rmtree(where)


def test_by_default_gold_and_empty_run_at_once_where_the_cores_allow() -> None:
    code, out = _run("validate", "-i", "mini__kvstore-2")
    assert code == 0, out
    cores = len(os.sched_getaffinity(0))
    assert ("at once" in out) == (cores >= 2) and ("one after the other" in out) == (cores < 2)


# -- a sandbox lost mid-validate --------------------------------------------------------------------------


class LoseFirstSandbox:
    """Removes the writable areas of the first sandbox this process opens, for as long as it is open:
    what a sandbox lost on a shared host looks like to the grader (its scratch area gone under it)."""

    def __init__(self) -> None:
        self.lost: Path | None = None
        self._stop = threading.Event()
        self._before = set(self._scratches())
        self._thread = threading.Thread(target=self._watch, daemon=True)

    @staticmethod
    def _scratches() -> list[Path]:
        return list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}{os.getpid()}-*"))

    def _watch(self) -> None:
        while not self._stop.is_set() and self.lost is None:
            fresh = [p for p in self._scratches() if p not in self._before]
            if fresh:
                self.lost = fresh[0]
            self._stop.wait(0.002)
        while not self._stop.is_set() and self.lost is not None and self.lost.exists():
            for area in ("tmp", "work"):
                shutil.rmtree(self.lost / area, ignore_errors=True)
            self._stop.wait(0.002)

    def __enter__(self) -> LoseFirstSandbox:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def test_a_sandbox_lost_mid_validate_is_reported_for_its_instance_alone() -> None:
    where = swe_fixture.open_folder()
    try:
        stored = where / "verdicts.jsonl"
        with LoseFirstSandbox() as loss:
            code, out = _run(
                "validate", "-i", "mini__kvstore-1", "-i", "mini__stats-2", "--one-by-one",
                "--concurrency", "1", "--retries", "0", "--results", str(stored),
            )  # fmt: skip
        assert loss.lost is not None
        assert code == 1 and "1/2 valid" in out and "1 instance(s) not graded" in out, out
        assert "mini__kvstore-1: gold not graded:" in out and "(infrastructure; 1 attempt)" in out
        verdicts = {(v.instance_id, v.which): v for v in _verdicts(stored)}
        assert verdicts["mini__kvstore-1", "gold"].error  # the lost grade, reported
        kept = verdicts["mini__kvstore-1", "empty"]  # the same instance's other grade, kept
        assert not kept.error and not kept.resolved
        assert verdicts["mini__stats-2", "gold"].resolved and not verdicts["mini__stats-2", "empty"].resolved
        # Graded again with --resume: only the lost grade runs, and the instance is valid.
        code, out = _run(
            "validate", "-i", "mini__kvstore-1", "-i", "mini__stats-2", "--results", str(stored), "--resume"
        )
        assert code == 0 and "2/2 valid" in out, out
        assert [(v.instance_id, v.which) for v in _verdicts(stored)[4:]] == [("mini__kvstore-1", "gold")]
    finally:
        shutil.rmtree(where)


def test_a_sandbox_lost_mid_validate_is_retried() -> None:
    where = swe_fixture.open_folder()
    try:
        stored = where / "verdicts.jsonl"
        with LoseFirstSandbox() as loss:
            code, out = _run(
                "validate", "-i", "mini__kvstore-1", "--one-by-one", "--results", str(stored),
            )  # fmt: skip
        assert loss.lost is not None
        assert code == 0 and "1/1 valid" in out and "retried after:" in out, out
        gold = next(v for v in _verdicts(stored) if v.which == "gold")
        assert gold.resolved and gold.attempts == 2 and gold.retried_after
    finally:
        shutil.rmtree(where)
