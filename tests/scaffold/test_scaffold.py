"""`envhub new`: the generated package really installs, registers its id and passes its own test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import envhub
from envhub.cli import app
from envhub.scaffold import ScaffoldError, create_plugin, plugin_names

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_FILES = {
    "pyproject.toml",
    "README.md",
    "envhub_word_reverse/__init__.py",
    "envhub_word_reverse/listing.py",
    "tests/test_env.py",
}


def test_names_are_derived_from_one_name() -> None:
    names = plugin_names("word-reverse")
    assert (names.package, names.module, names.class_name, names.env_id) == (
        "envhub-word-reverse",
        "envhub_word_reverse",
        "WordReverse",
        "word-reverse-v0",
    )


def test_generates_the_package_layout(tmp_path: Path) -> None:
    plugin = create_plugin("word-reverse", tmp_path)
    assert plugin.root == tmp_path / "envhub-word-reverse"
    assert {p.relative_to(plugin.root).as_posix() for p in plugin.files} == EXPECTED_FILES
    pyproject = (plugin.root / "pyproject.toml").read_text()
    assert '[project.entry-points."envhub.envs"]' in pyproject
    assert '"word-reverse-v0" = "envhub_word_reverse:WordReverse"' in pyproject
    assert 'name = "envhub-word-reverse"' in pyproject
    assert "$" not in "".join(p.read_text() for p in plugin.files), "a template placeholder was left unfilled"


@pytest.mark.slow
def test_generated_package_installs_and_passes_its_own_test(tmp_path: Path) -> None:
    plugin = create_plugin("word-reverse", tmp_path / "src")
    site = tmp_path / "site"
    install = subprocess.run(
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
            str(plugin.root),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert install.returncode == 0, install.stderr
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(plugin.root / "tests"), "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=plugin.root,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout, result.stdout
    card = subprocess.run(  # its catalog is found by entry point, as registry.yaml's generator finds it
        [
            sys.executable,
            "-c",
            "from envhub.index import plugin_catalog; "
            "print(plugin_catalog('envhub-word-reverse').envs['word-reverse'].model_dump_json())",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        timeout=120,
    )
    assert card.returncode == 0, card.stderr
    assert json.loads(card.stdout)["default_sandbox"] == "none"


def pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This venv's pip acting on another interpreter's environment (`--python`): no pip needed there."""
    command = [sys.executable, "-m", "pip", "--python", str(python), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_generated_package_in_a_fresh_venv_installs_the_core_not_pypis_envhub(tmp_path: Path) -> None:
    """`envhub` on the package index is an unrelated project; the plugin must depend on `envhub-core`,
    which pip finds only as the local wheel (the index has none), and nothing may bring in `envhub`."""
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    built = subprocess.run(
        [*build, "--wheel-dir", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.startswith(f"envhub_core-{envhub.__version__}-")
    plugin = create_plugin("word-reverse", tmp_path / "src")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"

    install = pip(python, "install", "--quiet", "--find-links", str(wheels), str(plugin.root), "pytest")
    assert install.returncode == 0, install.stdout + install.stderr
    listed = pip(python, "list", "--format", "json")
    installed = {entry["name"].lower(): entry["version"] for entry in json.loads(listed.stdout)}
    assert "envhub" not in installed, f"the unrelated `envhub` {installed['envhub']} was installed"
    assert installed["envhub-core"] == envhub.__version__
    result = subprocess.run(
        [str(python), "-m", "pytest", str(plugin.root / "tests"), "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        cwd=plugin.root,
        timeout=300,
    )
    assert "4 passed" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "My Env!",
            "'My Env!' is not a valid environment name: use lowercase letters, digits and single "
            "hyphens, starting with a letter. Try 'my-env'.",
        ),
        ("", "the environment name is empty"),
        ("2048", "Try 'word-reverse'"),
        ("word-reverse-v1", "'word-reverse-v1' ends in a version; give the bare name 'word-reverse'"),
        ("envhub-word-reverse", "starts with 'envhub-'; give the bare name 'word-reverse'"),
        ("arithmetic", "named 'arithmetic' already exists (arithmetic-v0 from plugin envhub-games)"),
        ("core", "'envhub-core' is the distribution of envhub's own library; pick another name"),
    ],
)
def test_bad_names_are_refused_with_the_fix(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(ScaffoldError) as caught:
        create_plugin(name, tmp_path)
    assert message in str(caught.value)
    assert not any(tmp_path.iterdir()), "nothing may be written for a refused name"


def test_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    plugin = create_plugin("word-reverse", tmp_path)
    module = plugin.root / "envhub_word_reverse" / "__init__.py"
    module.write_text("# edited by the author\n")
    (plugin.root / "NOTES.md").write_text("mine\n")
    with pytest.raises(ScaffoldError) as caught:
        create_plugin("word-reverse", tmp_path)
    assert str(caught.value) == (
        f"{plugin.root} already exists; choose another name or --dest, or pass --force to overwrite "
        "the generated files in it (other files are left alone)"
    )
    assert module.read_text() == "# edited by the author\n"
    create_plugin("word-reverse", tmp_path, force=True)
    assert "class WordReverse(envhub.ToolEnv)" in module.read_text()
    assert (plugin.root / "NOTES.md").read_text() == "mine\n"


def test_cli_new_prints_the_files_and_next_commands(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["new", "word-reverse", "--dest", str(tmp_path)])
    assert result.exit_code == 0, result.output
    root = tmp_path / "envhub-word-reverse"
    for relative in EXPECTED_FILES:
        assert relative in result.output
    assert f"pip install -e {ROOT} -e '{root}[test]'" in result.output  # the core from this checkout
    assert f"pytest {root}" in result.output


def test_cli_new_reports_errors_without_a_traceback(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["new", "word-reverse", "--dest", str(tmp_path)]).exit_code == 0
    again = runner.invoke(app, ["new", "word-reverse", "--dest", str(tmp_path)])
    assert again.exit_code == 2
    assert "already exists" in again.output
    assert "Traceback" not in again.output
    assert runner.invoke(app, ["new", "word-reverse", "--dest", str(tmp_path), "--force"]).exit_code == 0
