"""Commands as plugins (`envhub.commands`): found from installed distributions, imported only when asked for.

The distributions here are real: a dist-info folder (METADATA, entry_points.txt) beside its module, as
pip leaves them, read by importlib.metadata and imported for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envhub.cli import app, plugins

GREETER = """
    import typer

    app = typer.Typer(add_completion=False)

    @app.command()
    def greet(name: str, loud: bool = False) -> None:
        '''Say hello to NAME.'''
        print(("HELLO " if loud else "hello ") + name)
"""
BROKEN = "import cmdplug_dependency_that_is_not_installed  # noqa\n"


def install(
    site: Path, dist: str, commands: dict[str, str], modules: dict[str, str]
) -> metadata.Distribution:
    """A distribution as pip installs it: its modules and a dist-info declaring `commands`."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    declared = "".join(f"{name} = {target}\n" for name, target in commands.items())
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\n{declared}")
    for module, code in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(code))
    return metadata.Distribution.at(info)


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[metadata.Distribution]:
    """The only command plugins `envhub` sees in this test; each test adds its own (none: none installed)."""
    dists: list[metadata.Distribution] = []
    monkeypatch.syspath_prepend(str(tmp_path))
    # A generator: read when envhub first looks, after the test has installed its distributions.
    found = (ep for d in dists for ep in d.entry_points.select(group=plugins.ENTRY_POINT_GROUP))
    monkeypatch.setattr(plugins, "shared", plugins.CommandPlugins(found))
    return dists


def test_a_plugin_command_runs_with_its_own_options(
    tmp_path: Path, installed: list[metadata.Distribution]
) -> None:
    installed.append(
        install(tmp_path, "cmdplug-good", {"hello": "cmdplug_good:app"}, {"cmdplug_good": GREETER})
    )
    result = CliRunner().invoke(app, ["hello", "World", "--loud"])
    assert result.exit_code == 0, result.output
    assert result.output == "HELLO World\n"
    listing = CliRunner().invoke(app, ["--help"]).output
    assert "hello" in listing and "Say hello to NAME." in listing


def test_a_broken_plugin_breaks_only_its_own_command(
    tmp_path: Path, installed: list[metadata.Distribution]
) -> None:
    installed.append(
        install(tmp_path, "cmdplug-broken", {"oops": "cmdplug_broken:app"}, {"cmdplug_broken": BROKEN})
    )
    listing = CliRunner().invoke(app, ["--help"])
    assert listing.exit_code == 0, listing.output
    assert "oops" in listing.output and "broken plugin cmdplug-broken" in listing.output
    assert "rollout" in listing.output
    result = CliRunner().invoke(app, ["oops", "anything", "--flag"])
    assert result.exit_code == 2
    assert "command 'oops' from plugin cmdplug-broken could not be loaded" in result.output
    assert "No module named 'cmdplug_dependency_that_is_not_installed'" in result.output
    assert "cmdplug_broken.py" in result.output  # the plugin's own traceback
    assert CliRunner().invoke(app, ["list", "--json"]).exit_code == 0


def test_an_entry_point_that_is_not_a_typer_app_says_what_it_must_be(
    tmp_path: Path, installed: list[metadata.Distribution]
) -> None:
    code = "def app() -> None:\n    print('never')\n"
    installed.append(
        install(tmp_path, "cmdplug-plain", {"plain": "cmdplug_plain:app"}, {"cmdplug_plain": code})
    )
    result = CliRunner().invoke(app, ["plain"])
    assert result.exit_code == 2
    assert "'cmdplug_plain:app' is a function; an `envhub.commands` entry point must name a typer.Typer" in (
        result.output
    )


def test_two_plugins_claiming_one_command_are_refused_by_name(
    tmp_path: Path, installed: list[metadata.Distribution]
) -> None:
    installed.append(install(tmp_path, "cmdplug-one", {"hello": "cmdplug_one:app"}, {"cmdplug_one": GREETER}))
    installed.append(install(tmp_path, "cmdplug-two", {"hello": "cmdplug_two:app"}, {"cmdplug_two": GREETER}))
    result = CliRunner().invoke(app, ["hello", "World"])
    assert result.exit_code == 2
    assert "the command 'hello' is provided by more than one plugin" in result.output
    assert "plugin cmdplug-one: hello = cmdplug_one:app" in result.output
    assert "plugin cmdplug-two: hello = cmdplug_two:app" in result.output


def test_a_plugin_cannot_replace_a_core_command(
    tmp_path: Path, installed: list[metadata.Distribution]
) -> None:
    installed.append(
        install(tmp_path, "cmdplug-list", {"list": "cmdplug_list:app"}, {"cmdplug_list": GREETER})
    )
    result = CliRunner().invoke(app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    assert result.output.lstrip().startswith("[")


@pytest.mark.parametrize(
    ("argv", "package", "checkout"),
    [
        (["train", "run.yaml", "--plot", "run"], "envhub-trainer", "trainer"),
        (["report", "run"], "envhub-trainer", "trainer"),
        (["swe", "validate", "--dataset", "swe-mini"], "envhub-swe", "envs/swe"),
    ],
)
def test_a_first_party_command_not_installed_says_what_to_install(
    installed: list[metadata.Distribution], argv: list[str], package: str, checkout: str
) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert f"`envhub {argv[0]}` comes from the package '{package}', which is not installed" in result.output
    assert f"pip install {package}" in result.output and f"pip install -e {checkout}" in result.output
    listing = CliRunner().invoke(app, ["--help"]).output
    assert f"not installed: `envhub {argv[0]}`" in listing


def test_a_typo_is_answered_with_the_plugin_command_it_meant(
    tmp_path: Path, installed: list[metadata.Distribution]
) -> None:
    installed.append(
        install(tmp_path, "cmdplug-good", {"hello": "cmdplug_good:app"}, {"cmdplug_good": GREETER})
    )
    result = CliRunner().invoke(app, ["helo", "World"])
    assert result.exit_code == 2
    assert "Did you mean 'hello'?" in result.output


def test_installed_distributions_are_found_by_a_fresh_envhub(tmp_path: Path) -> None:
    """End to end: the entry points come from the interpreter's own path, not from the test."""
    install(tmp_path, "cmdplug-good", {"hello": "cmdplug_good:app"}, {"cmdplug_good": GREETER})
    install(tmp_path, "cmdplug-broken", {"oops": "cmdplug_broken:app"}, {"cmdplug_broken": BROKEN})
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))

    def envhub(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "envhub", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": path, "COLUMNS": "200"},
            timeout=120,
        )

    listing = envhub("--help")
    assert listing.returncode == 0, listing.stderr
    for line in ("hello", "oops", "swe", "train", "report", "rollout"):
        assert f"│ {line} " in listing.stdout
    greeted = envhub("hello", "World")
    assert (greeted.returncode, greeted.stdout) == (0, "hello World\n"), greeted.stderr
    broken = envhub("oops")
    assert broken.returncode == 2 and "from plugin cmdplug-broken could not be loaded" in broken.stderr


def test_the_first_party_commands_are_plugins_of_their_own_distributions() -> None:
    declared = {
        ep.name: (ep.value, ep.dist.name if ep.dist else None)
        for ep in metadata.entry_points(group=plugins.ENTRY_POINT_GROUP)
    }
    assert declared["swe"] == ("envhub_swe.cli:app", "envhub-swe")
    assert declared["train"] == ("envhub_trainer.cli:train_app", "envhub-trainer")
    assert declared["report"] == ("envhub_trainer.cli:report_app", "envhub-trainer")
    assert set(plugins.KNOWN_COMMANDS) <= set(declared)
