"""Format plugins (`envhub.formats`): ids such as `toyfmt:some/path` made by a plugin's `make_env`.

The distribution is a real dist-info folder read by `importlib.metadata`, as pip leaves it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import envhub
from envhub.env_spec import UnknownOptionError
from envhub.registration import FORMAT_GROUP, PluginImportError, Registry, UnknownEnvError, is_external
from envhub.rollout.kwargs import check_env_kwargs

TOYFMT = """
    import envhub

    class Echo(envhub.SingleTurnEnv):
        '''Says back its target.'''

        def __init__(self, word: str) -> None:
            super().__init__()
            self.word = word

        def setup(self, rng):
            return f"say {self.word}"

        @envhub.reward
        def said(self, answer):
            return float(answer.strip() == self.word)

    def make_env(target, *, max_turns=None, shout=False):
        return Echo(target.upper() if shout else target)
"""


@pytest.fixture
def toyfmt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    info = tmp_path / "fmtplug_toys-0.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fmtplug-toys\nVersion: 0.2\n")
    (info / "entry_points.txt").write_text(
        f"[{FORMAT_GROUP}]\ntoyfmt = fmtplug_toys:make_env\nbrokenfmt = fmtplug_missing:make_env\n"
    )
    (tmp_path / "fmtplug_toys.py").write_text(textwrap.dedent(TOYFMT))
    monkeypatch.syspath_prepend(str(tmp_path))
    return Registry()


async def test_a_format_id_is_made_by_the_plugin_with_the_target_and_options(toyfmt: Registry) -> None:
    env = toyfmt.make("toyfmt:some/path:with-colons", shout=True, max_turns=3)
    assert env.spec is not None
    assert env.spec.id == "toyfmt:some/path:with-colons"
    assert env.spec.env_kwargs == {"shout": True}
    assert env.spec.max_turns == 3 == env.max_turns
    assert (env.spec.provenance.package, env.spec.provenance.package_version) == ("fmtplug-toys", "0.2")
    observation, _ = await env.reset(seed=0)
    assert "SOME/PATH:WITH-COLONS" in str(observation)
    result = await env.step("SOME/PATH:WITH-COLONS")
    assert result.reward == 1.0
    await env.close()


def test_a_format_id_is_its_own_spec_without_making_the_env(toyfmt: Registry) -> None:
    spec = toyfmt.spec("toyfmt:anything")
    assert spec.id == "toyfmt:anything"
    assert spec.provenance.entry_point == "fmtplug_toys:make_env"
    assert is_external("toyfmt:anything")
    assert not is_external("arithmetic")


def test_a_broken_format_plugin_says_so_and_names_the_fix(toyfmt: Registry) -> None:
    with pytest.raises(PluginImportError, match=r"(?s)brokenfmt.*fmtplug-toys.*Fix or reinstall"):
        toyfmt.make("brokenfmt:x")


def test_an_unknown_prefix_is_not_a_format(toyfmt: Registry) -> None:
    assert not is_external("nosuchfmt:x")
    with pytest.raises((UnknownEnvError, envhub.InvalidEnvId)):
        toyfmt.make("nosuchfmt:x")


def test_options_of_a_format_id_are_those_its_plugin_declares(toyfmt: Registry) -> None:
    """The plugin's factory signature declares them: a batch refuses an unknown one before it starts."""
    check_env_kwargs("toyfmt:x", {"shout": True})
    with pytest.raises(UnknownOptionError, match=r"toyfmt:x has no option 'anything'; its options: shout"):
        check_env_kwargs("toyfmt:x", {"anything": 1})
