"""The wall time per test directory that every run prints at its end (tests/envhub_testkit/wall_time.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_each_directory_gets_its_tests_time_and_failures(tmp_path: Path) -> None:
    (tmp_path / "fast").mkdir()
    (tmp_path / "slow").mkdir()
    (tmp_path / "fast" / "test_a.py").write_text(
        "def test_one():\n    pass\n\ndef test_two():\n    assert False\n"
    )
    (tmp_path / "slow" / "test_b.py").write_text("import time\n\ndef test_three():\n    time.sleep(0.4)\n")
    table = tmp_path / "out" / "wall.txt"
    plugin = ["-p", "tests.envhub_testkit.wall_time", "--wall-time-file", str(table)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugin],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "wall time per test directory" in run.stdout, run.stdout + run.stderr
    lines = table.read_text().splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert set(rows) == {"fast", "slow"}
    assert rows["fast"][1:3] == ["2", "1"]  # two tests, one failed
    assert rows["slow"][1:3] == ["1", "0"]
    assert lines[1].startswith("slow"), "the slowest directory comes first"
    assert float(rows["slow"][3].removesuffix("s")) >= 0.4
    assert lines[-1].split()[:3] == ["all", "3", "1"]
