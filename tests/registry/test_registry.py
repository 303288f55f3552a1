"""Ids, register/make, and the messages a user gets when an id is wrong."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import envhub
from envhub.index import load_index
from envhub.registration import Registry

INDEX = load_index(Path(__file__).parents[2] / "registry.yaml")


class Tiny(envhub.SingleTurnEnv):
    def __init__(self, word: str = "hi") -> None:
        super().__init__()
        self.word = word

    def setup(self, rng: random.Random) -> str:
        return f"Say {self.word}"


@pytest.mark.parametrize(
    ("env_id", "parsed"),
    [
        ("arithmetic-v0", (None, "arithmetic", 0)),
        ("arithmetic", (None, "arithmetic", None)),
        ("acme/web-shop-v12", ("acme", "web-shop", 12)),
        ("swe-bench-lite", (None, "swe-bench-lite", None)),
    ],
)
def test_parse_env_id(env_id: str, parsed: tuple[str | None, str, int | None]) -> None:
    assert tuple(envhub.parse_env_id(env_id)) == parsed
    assert str(envhub.parse_env_id(env_id)) == env_id


@pytest.mark.parametrize("bad", ["", "a/b/c-v0", "has space-v0", "-v1"])
def test_malformed_id_is_rejected_with_an_example(bad: str) -> None:
    with pytest.raises(envhub.InvalidEnvId, match=r"expected '\[namespace/\]name\[-vN\]'"):
        envhub.parse_env_id(bad)


def test_register_and_make_pass_kwargs_and_set_spec() -> None:
    registry = Registry(INDEX, discover_plugins=False)
    registry.register("tiny-v0", Tiny, kwargs={"word": "hello"}, max_turns=1)
    env = registry.make("tiny", word="bye")
    assert isinstance(env, Tiny) and env.word == "bye"
    assert env.spec is not None
    assert env.spec.id == "tiny-v0" and env.spec.version == 0
    assert env.spec.env_kwargs == {"word": "bye"}
    assert env.spec.provenance.entry_point == f"{__name__}:Tiny"
    assert env.spec.max_turns == 1 == registry.spec("tiny").max_turns  # spec() says what make() sets


def test_spec_leaves_the_turn_limit_to_the_constructor_when_the_registration_sets_none() -> None:
    registry = Registry(INDEX, discover_plugins=False)
    registry.register("tiny-v0", Tiny)
    assert registry.spec("tiny").max_turns is None  # the constructor's choice may follow its arguments
    assert registry.make("tiny").spec.max_turns == Tiny.max_turns  # type: ignore[union-attr]


def test_unversioned_id_picks_newest_version() -> None:
    registry = Registry(INDEX, discover_plugins=False)
    for version in (0, 3, 1):
        registry.register(f"tiny-v{version}", Tiny)
    assert registry.make("tiny").spec is not None
    assert registry.spec("tiny").id == "tiny-v3"


def test_register_same_id_twice_names_the_first_registration() -> None:
    registry = Registry(INDEX, discover_plugins=False)
    registry.register("tiny-v0", Tiny)
    with pytest.raises(
        envhub.DuplicateEnvError, match=r"already registered by register\(\) in .*override=True"
    ):
        registry.register("tiny-v0", Tiny)
    registry.register("tiny-v0", Tiny, override=True)


def test_unknown_id_suggests_close_matches() -> None:
    registry = Registry(INDEX, discover_plugins=False)
    registry.register("tiny-v0", Tiny)
    with pytest.raises(envhub.UnknownEnvError) as caught:
        registry.make("tinny-v0")
    assert "no environment 'tinny-v0' is registered" in str(caught.value)
    assert "Did you mean: tiny-v0" in str(caught.value)


def test_unknown_id_known_to_index_names_the_package_to_install() -> None:
    registry = Registry(INDEX, discover_plugins=False)
    with pytest.raises(envhub.UnknownEnvError) as caught:
        registry.make("arithmetic")
    assert "provided by the package 'envhub-games', which is not installed: pip install envhub-games" in str(
        caught.value
    )


def test_unknown_version_of_installed_env_lists_known_versions() -> None:
    with pytest.raises(envhub.UnknownEnvError, match=r"Known versions of 'arithmetic': \[0\]"):
        envhub.make("arithmetic-v9")


def test_entry_point_that_builds_no_env_is_a_clear_type_error() -> None:
    registry = Registry(INDEX, discover_plugins=False)
    registry.register("notenv-v0", lambda: object())  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match=r"not an envhub\.Env; point the entry point at an Env subclass"):
        registry.make("notenv-v0")


def test_string_entry_point_to_missing_module_is_a_plugin_import_error() -> None:
    registry = Registry(INDEX, discover_plugins=False)
    registry.register("ghost-v0", "envhub_no_such_module:Env")
    with pytest.raises(envhub.PluginImportError, match="No module named 'envhub_no_such_module'"):
        registry.make("ghost-v0")


def test_max_turns_override_is_validated_and_applied() -> None:
    env = envhub.make("guess-number", max_turns=3)
    assert env.max_turns == 3 and env.spec is not None and env.spec.max_turns == 3
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        envhub.make("guess-number", max_turns=0)
