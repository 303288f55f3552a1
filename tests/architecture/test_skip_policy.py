"""The suite's skip policy (the root conftest.py): skips are listed with reasons; strict runs fail on
any skip that is not on the allow-list."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = """
import pytest

def test_needs_hardware():
    pytest.skip("this test needs a GPU")

def test_needs_data():
    pytest.skip("SWE-bench Lite is not at /nowhere")

def test_runs():
    pass
"""


def run_pytest(folder: Path, *args: str, ci: bool = False) -> subprocess.CompletedProcess[str]:
    """pytest on `folder` with the repository's conftest.py as its only plugin."""
    (folder / "test_example.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true" if ci else ""}
    command = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-c", os.devnull]
    return subprocess.run(
        [*command, "--rootdir", str(folder), *args, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=120,
    )


def test_every_skip_is_listed_with_its_reason(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "-k", "needs")
    assert result.returncode == 0, result.stdout
    assert "2 skipped, each with its reason" in result.stdout
    assert "allowed     test_example.py::test_needs_hardware: this test needs a GPU" in result.stdout
    assert "allowed     test_example.py::test_needs_data: SWE-bench Lite is not at /nowhere" in result.stdout


@pytest.mark.parametrize(("ci", "code"), [(False, 0), (True, 1)])
def test_strict_runs_allow_only_listed_skips(tmp_path: Path, ci: bool, code: int) -> None:
    """The data skip is allowed on a developer's machine; CI has the data, so there it fails the run."""
    result = run_pytest(tmp_path, "--strict-skips", ci=ci)
    assert result.returncode == code, result.stdout
    if ci:
        assert "NOT ALLOWED test_example.py::test_needs_data" in result.stdout
        assert "1 skip(s) not on the allow-list" in result.stdout


def test_a_skip_off_the_list_fails_a_strict_run(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text("import pytest\n\ndef test_x():\n    pytest.skip('no engine')\n")
    assert run_pytest(tmp_path, "--strict-skips").returncode == 1
    assert run_pytest(tmp_path).returncode == 0  # without --strict-skips the skip is only listed
