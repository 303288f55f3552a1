"""The trainer's shipped test helpers change nothing on import: the digits env is registered by the
tests' fixtures (or a process that plays it), never by `import envhub_trainer.testing`."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_test_helpers_registers_no_env() -> None:
    code = (
        "import envhub, envhub_trainer.testing as t; "
        "print(t.DIGITS_ENV in set(envhub.registry.registrations())); "
        "t.register_digits(); "
        "print(t.DIGITS_ENV in set(envhub.registry.registrations()))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]
