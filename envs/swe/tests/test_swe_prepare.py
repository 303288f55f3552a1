"""`prepare` on a swe-mini repository: real SWE-bench clones are not reachable from CI (no GitHub)."""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from pathlib import Path

import pytest
from envhub_swe.data import MINI_DATA, load_lite, load_mini, select
from envhub_swe.prepare import Unsupported, check_python, prepare, prepared
from envhub_swe.runtime import cache_root, grade
from test_swe_data import LITE, needs_lite


def test_prepare_makes_a_checkout_at_base_commit_that_grades() -> None:
    # Under the cache root, not pytest's tmp_path: the sandbox's uid must reach the bound venv and objects.
    tmp_path = Path(tempfile.mkdtemp(dir=cache_root()))
    tmp_path.chmod(0o755)
    (row,) = select(load_mini(), instance="mini__kvstore-2")  # unittest style: no packages to install
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(MINI_DATA / "kvstore.bundle"), str(clone)], check=True)
    dest = prepare(row, clone, tmp_path / "ws")
    repo = dest / "repo"
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    assert head == row.base_commit
    refs = subprocess.run(["git", "for-each-ref"], cwd=repo, capture_output=True, text=True).stdout
    assert refs == ""  # no branch leads to the later commit
    runtime, workspace = prepared(row, tmp_path / "ws", "local")
    assert asyncio.run(grade(row, row.patch, runtime, workspace)).resolved
    assert not asyncio.run(grade(row, "", runtime, workspace)).resolved


@needs_lite
def test_instances_that_cannot_run_on_new_python_are_refused_with_the_reason() -> None:
    rows = load_lite("test", LITE)
    old_pytest = next(r for r in rows if r.repo == "pytest-dev/pytest" and r.version == "5.4")
    with pytest.raises(Unsupported, match=r"Python 3\.11.*3\.10"):
        check_python(old_pytest, (3, 11))
    assert check_python(old_pytest, (3, 9)) is not None
    unknown = next(r for r in rows if r.repo == "django/django")
    with pytest.raises(Unsupported, match="--requirements"):
        check_python(unknown, (3, 11))


def test_unprepared_instance_says_how_to_prepare(tmp_path: Path) -> None:
    row = load_mini()[0]
    with pytest.raises(Unsupported, match="envhub swe prepare --instance mini__textkit-1"):
        prepared(row, tmp_path, "local")
