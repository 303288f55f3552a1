"""Shared fixtures: real plugin packages installed into a private directory, and a way to use them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

PLUGINS = Path(__file__).parent / "plugins"


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test plugins, really built and installed by pip, into a directory outside the dev venv."""
    site = tmp_path_factory.mktemp("plugin-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            *(str(PLUGINS / name) for name in ("good", "broken", "dup")),
        ],
        check=True,
        capture_output=True,
    )
    return site


RunPython = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_python(plugin_site: Path) -> RunPython:
    """Run Python code in a fresh interpreter that sees the installed test plugins."""

    def run(code: str, *, plugins: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(plugin_site) if plugins else ""}
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    return run
