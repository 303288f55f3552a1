"""`envhub new`'s next steps work as printed in a fresh venv (issue 31.4: `pip install -e envhub-my-env`
failed there with `No matching distribution found for envhub-core>=0.1`, the index having no
envhub-core): the hint installs the core from where this one came, and the plugin's test extra."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.scaffold import core_source

ROOT = Path(__file__).resolve().parents[2]


def test_the_hint_installs_the_core_from_where_this_one_came() -> None:
    assert core_source() == f"-e {ROOT}"  # this checkout, installed editable by `make install`


@pytest.mark.slow
def test_the_hint_of_envhub_new_works_as_printed_in_a_fresh_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    made = CliRunner().invoke(app, ["new", "my-env"], env={"COLUMNS": "400"})
    assert made.exit_code == 0, made.output
    lines = made.stdout.splitlines()
    steps = lines[lines.index(next(line for line in lines if line.startswith("Next"))) + 1 :]
    install, test = (shlex.split(step) for step in steps)
    assert install[:2] == ["pip", "install"] and test[0] == "pytest"

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "venv"], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    # the printed line, run by this venv's pip on the fresh one (which has no pip of its own)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    installed = subprocess.run([*pip, *install[1:]], capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    tested = subprocess.run(
        [str(python), "-m", *test, "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "4 passed" in tested.stdout
    assert f"envhub-core comes from {ROOT}" in made.stdout  # and the hint says where the core came from
