"""Every envhub id in the catalog is a gymnasium id, namespaced ones included, by one reversible mapping.

gymnasium's grammar is `[namespace/]name[-vN]`: `envhub/reasoning-gym/chain_sum-v0` cannot parse, so a
namespaced id is `envhub-<namespace>/<name>[-vN]`. Registering is cheap and making is not: every id's
parse and round trip is checked, and one id of each kind of source is made and reset.
"""

from __future__ import annotations

import gymnasium
import pytest
from gymnasium.envs.registration import parse_env_id

import envhub
from envhub.integrations.gymnasium import envhub_id, gymnasium_id


def test_every_catalog_id_parses_in_gymnasium_and_maps_back() -> None:
    registrations = envhub.registry.registrations().items()
    ids = [i for i, r in registrations if r.origin.startswith("plugin ")]  # not ids other tests register
    assert len(ids) > 400 and any("/" in i for i in ids)  # the whole catalog, namespaced ids included
    for env_id in ids:
        name = gymnasium_id(env_id)
        namespace, _, _ = parse_env_id(name)  # gymnasium's own parser: raises on a malformed id
        assert namespace is not None and namespace.startswith("envhub"), name
        assert envhub_id(name) == env_id
        assert gymnasium.spec(name).kwargs["env_id"] == env_id


@pytest.mark.parametrize(
    ("name", "env_id"),
    [
        ("envhub/arithmetic-v0", "arithmetic-v0"),
        ("envhub-reasoning-gym/chain_sum-v0", "reasoning-gym/chain_sum-v0"),
        ("envhub-gym/FrozenLake-v1", "gym/FrozenLake-v1"),
        ("envhub-textarena/2048-3x3-v0", "textarena/2048-3x3-v0"),
    ],
)
def test_gymnasium_makes_a_namespaced_id_as_the_docs_spell_it(name: str, env_id: str) -> None:
    assert gymnasium_id(env_id) == name
    env = gymnasium.make(name)
    try:
        observation, _ = env.reset(seed=0)
        assert isinstance(observation, str) and observation
        assert env.unwrapped.envhub_spec.id == env_id  # type: ignore[attr-defined]
    finally:
        env.close()


def test_an_id_gymnasium_cannot_spell_says_how_to_adapt_it() -> None:
    with pytest.raises(ValueError, match=r"no gymnasium id.*to_gymnasium\(envhub\.make\("):
        gymnasium_id("acme.corp/shop-v1")  # envhub's grammar allows a '.' in a namespace, gymnasium's not
    with pytest.raises(ValueError, match="not an envhub gymnasium id"):
        envhub_id("FrozenLake-v1")
