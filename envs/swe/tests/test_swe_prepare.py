"""`prepare` on a swe-mini repository: real SWE-bench clones are not reachable from CI (no GitHub)."""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from pathlib import Path

import pytest
from envhub_swe.data import MINI_DATA, load_mini, select
from envhub_swe.prepare import Unsupported, prepare, prepared
from envhub_swe.runtime import cache_root, grade
from envhub_swe.specs import SetupPlan


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
    later = subprocess.run(
        ["git", "for-each-ref", "--no-merged", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert "refs/heads/" not in refs and later == ""  # no ref leads to a later commit
    runtime, workspace = prepared(row, tmp_path / "ws", "local")
    assert asyncio.run(grade(row, row.patch, runtime, workspace)).resolved
    assert not asyncio.run(grade(row, "", runtime, workspace)).resolved


def test_an_instance_whose_python_is_missing_is_refused_with_the_fix() -> None:
    tmp_path = Path(tempfile.mkdtemp(dir=cache_root()))
    tmp_path.chmod(0o755)
    (row,) = select(load_mini(), instance="mini__kvstore-2")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(MINI_DATA / "kvstore.bundle"), str(clone)], check=True)
    plan = SetupPlan(python="3.2", steps=(), source="test")
    with pytest.raises(Unsupported, match=r"Python 3\.2.*pyenv install 3\.2.*--python"):
        prepare(row, clone, tmp_path / "ws", plan=plan)
    assert not (tmp_path / "ws" / row.instance_id).exists()


def test_unprepared_instance_says_how_to_prepare(tmp_path: Path) -> None:
    row = load_mini()[0]
    with pytest.raises(Unsupported, match="envhub swe prepare --instance mini__textkit-1"):
        prepared(row, tmp_path, "local")
