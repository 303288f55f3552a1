"""benchmarks/gpu.sh runs only on a lent GPU machine, with 15 minutes of device time a session: it must
be right before it gets there. These check its syntax, its time plan, and that every option it passes to
the project's scripts exists, which is what breaks first when a script changes here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu.sh"


def dry_run() -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, check=False)


def test_the_script_parses_and_its_plan_fits_the_device_limit() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0
    planned = dry_run()
    assert planned.returncode == 0, planned.stderr
    found = re.search(r"total of the timeouts: (\d+) s \(budget (\d+) s\)", planned.stdout)
    assert found is not None, planned.stdout
    total, budget = int(found[1]), int(found[2])
    assert total <= budget < 600  # the device tool kills a command at 600 s


def test_every_python_script_it_runs_exists_and_takes_the_options_it_is_given() -> None:
    for line in dry_run().stdout.splitlines():
        for script, options in re.findall(r"python3 (benchmarks/\S+\.py)([^;&|]*)", line):
            assert (ROOT / script).is_file(), script
            helped = subprocess.run(
                [sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, check=False
            )
            assert helped.returncode == 0, helped.stderr
            for option in re.findall(r"(--[a-z][a-z-]*)", options):
                assert option in helped.stdout, f"{script} has no {option} option"
