"""Namespace plugins (`envhub.namespaces`): a plugin that resolves a whole family of ids on demand.

The distributions are real dist-info folders read by `importlib.metadata`, as pip leaves them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

import envhub
from envhub.registration import NAMESPACE_GROUP, PluginImportError, Registry, UnknownEnvError

TOYS = """
    import envhub

    class Echo(envhub.SingleTurnEnv):
        '''Says back its name.'''

        def __init__(self, word: str) -> None:
            super().__init__()
            self.word = word

        def setup(self, rng):
            return f"say {self.word}"

        @envhub.reward
        def said(self, answer):
            return float(answer.strip() == self.word)

    def factory_for(name):
        if name.startswith("Missing"):
            return None
        if name.startswith("Broken"):
            raise RuntimeError("the toy catalogue is corrupt")
        return lambda **kwargs: Echo(name, **kwargs)
"""


@pytest.fixture
def toys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    info = tmp_path / "nsplug_toys-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nsplug-toys\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{NAMESPACE_GROUP}]\ntoys = nsplug_toys:factory_for\n")
    (tmp_path / "nsplug_toys.py").write_text(textwrap.dedent(TOYS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return Registry()


def test_an_id_of_the_namespace_is_made_by_the_plugin(toys: Registry) -> None:
    spec = toys.spec("toys/Parrot-v3")
    assert (spec.namespace, spec.name, spec.version) == ("toys", "Parrot", 3)
    assert spec.provenance.package == "nsplug-toys"


def test_the_colon_form_means_the_same_id(toys: Registry) -> None:
    assert toys.resolve("toys:Parrot-v3").id == "toys/Parrot-v3"


async def test_the_made_env_plays_and_scores(toys: Registry) -> None:
    env = toys.make("toys:Parrot-v3")
    await env.reset(seed=0)
    result = await env.step("Parrot-v3")
    assert (result.terminated, result.reward) == (True, 1.0)
    await env.close()


def test_an_id_the_plugin_does_not_know_is_unknown(toys: Registry) -> None:
    with pytest.raises(UnknownEnvError, match="toys/Missing-v0"):
        toys.resolve("toys/Missing-v0")


def test_a_failing_plugin_is_named_in_the_error(toys: Registry) -> None:
    with pytest.raises(PluginImportError, match=r"nsplug-toys.*the toy catalogue is corrupt"):
        toys.resolve("toys/Broken-v0")


def test_a_colon_in_an_id_of_no_namespace_plugin_is_still_malformed(toys: Registry) -> None:
    with pytest.raises(envhub.InvalidEnvId):
        toys.resolve("nosuchplugin:Parrot-v3")


def test_namespace_entry_points_are_found_by_name(toys: Registry) -> None:
    assert [ep.value for ep in metadata.entry_points(group=NAMESPACE_GROUP, name="toys")] == [
        "nsplug_toys:factory_for"
    ]


def test_a_plugin_declaring_a_malformed_id_hides_nothing_else(tmp_path: Path) -> None:
    """One plugin's bad entry-point name (a '/' too many) is reported; `import envhub` and other ids work."""
    info = tmp_path / "badname-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: badname\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[envhub.envs]\nbad/taboo-city/country-v0 = badname:Env\n")
    code = (
        "import json, envhub; r = envhub.registry; ids = r.registrations(); "
        "print(json.dumps(['arithmetic-v0' in ids, sorted(r.malformed)]))"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, ["bad/taboo-city/country-v0"]]
