"""The bundled model's conversion needs only what the trainer declares (issue 16.8): `smollm2_dir()`
works in an install of envhub-trainer's own requirements."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest


@pytest.mark.slow
def test_smollm2_converts_with_the_trainers_declared_dependencies(tmp_path: Path) -> None:
    """`smollm2_dir()` loads a GGUF file, which transformers does only with `accelerate`."""
    requirements = metadata.requires("envhub-trainer") or []
    assert any(r.startswith("accelerate") and "extra ==" not in r for r in requirements)
    target = tmp_path / "smollm2"
    code = f"import pathlib, envhub_trainer.models as m; m.smollm2_dir(pathlib.Path({str(target)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env={**os.environ}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (target / "config.json").exists() and (target / "tokenizer.json").exists()
