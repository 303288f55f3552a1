"""Plugin discovery through real installed packages, and the errors users see when plugins go wrong."""

from __future__ import annotations

from tests.conftest import RunPython


def test_installed_plugin_is_discovered_and_made(run_python: RunPython) -> None:
    result = run_python(
        """
        import asyncio, envhub
        from envhub.wrappers import unwrap
        env = envhub.make("testplug/echo-v0")
        provenance = env.spec.provenance
        print(env.spec.id, env.spec.namespace, provenance.package, provenance.package_version)
        obs, _ = asyncio.run(env.reset(seed=1))
        print(type(unwrap(env)).__name__, obs[0].text)
        """
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == "testplug/echo-v0 testplug envhub-testplugin-good 1.2.3"
    assert second.startswith("Echo Say ")


def test_unversioned_id_means_newest_version(run_python: RunPython) -> None:
    result = run_python(
        "import envhub; from envhub.wrappers import unwrap; env = envhub.make('testplug/echo'); "
        "print(env.spec.id, type(unwrap(env)).__name__)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "testplug/echo-v1 LoudEcho"


def test_plugin_import_failure_names_plugin_and_shows_its_traceback(run_python: RunPython) -> None:
    result = run_python(
        """
        import envhub
        try:
            envhub.make("broken-v0")
        except envhub.PluginImportError as exc:
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    message = result.stdout
    assert "'broken-v0' from plugin envhub-testplugin-broken" in message
    assert "ModuleNotFoundError: No module named 'envhub_missing_dependency_for_tests'" in message
    assert "Traceback" in message and "envhub_testplugin_broken/__init__.py" in message


def test_broken_plugin_does_not_stop_other_plugins(run_python: RunPython) -> None:
    result = run_python("import envhub; print(envhub.make('testplug/echo-v0').spec.id)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "testplug/echo-v0"


def test_duplicate_id_from_two_plugins_names_both(run_python: RunPython) -> None:
    result = run_python(
        """
        import envhub
        try:
            envhub.make("dup-v0")
        except envhub.DuplicateEnvError as exc:
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "'dup-v0' is provided by more than one plugin" in result.stdout
    assert "plugin envhub-testplugin-good" in result.stdout
    assert "plugin envhub-testplugin-dup" in result.stdout


def test_cli_list_shows_plugins_and_conflicts(run_python: RunPython) -> None:
    result = run_python(
        """
        import json
        from typer.testing import CliRunner
        from envhub.cli import app
        out = CliRunner().invoke(app, ["list", "--json"]).output
        rows = {row["id"]: row for row in json.loads(out)}
        print(rows["testplug/echo-v1"]["package"], rows["testplug/echo-v1"]["installed"])
        print(sorted(rows["dup-v0"]["conflict"]))
        """
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == "envhub-testplugin-good True"
    assert second == "['plugin envhub-testplugin-dup', 'plugin envhub-testplugin-good']"


def test_unknown_id_without_plugins_suggests_close_match(run_python: RunPython) -> None:
    result = run_python(
        """
        import envhub
        try:
            envhub.make("testplug/ecko-v0")
        except envhub.UnknownEnvError as exc:
            print(exc)
        """
    )
    assert "no environment 'testplug/ecko-v0' is registered" in result.stdout
    assert "Did you mean: testplug/echo-v0" in result.stdout
