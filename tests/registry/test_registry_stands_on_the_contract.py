"""The registry is a leaf: it resolves ids and imports nothing above the contract.

The lock hash is stamped by whoever records a spec (the runner, `envhub serve`, `envhub info`), and a
URL id is made by a scheme plugin found through the `envhub.schemes` entry points (envhub's own served
envs are one), so resolving an id reaches neither the lock, nor the Docker backend, nor the serve client.
"""

from __future__ import annotations

import ast
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

import envhub.registration
from envhub.lock.lockfile import current
from envhub.lock.stamp import stamp
from envhub.policies import OraclePolicy
from envhub.registration import SCHEME_GROUP, PluginImportError, Registry, is_external, scheme_of
from envhub.rollout import run_batch

PACKAGE = Path(envhub.registration.__file__).parent
MACHINERY = ("envhub.lock", "envhub.sandbox", "envhub.serve", "envhub.rollout", "envhub.formats")
"""The parts above the registry that resolving an id used to reach: the lock, the sandboxes (Docker's
backend through the lock), the serve client, the runner, the format plugins."""


def source_of(module: str) -> Path | None:
    parts = module.split(".")[1:]
    for candidate in (PACKAGE.joinpath(*parts).with_suffix(".py"), PACKAGE.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def envhub_imports(path: Path) -> set[str]:
    """Every envhub module a file imports, at the top, under TYPE_CHECKING or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if source_of(f"{node.module}.{a.name}")}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.split(".")[0] == "envhub" and source_of(name)}


def reached_from(module: str) -> set[str]:
    """Every envhub module `module` imports, directly or through the modules it imports."""
    seen, todo = set(), [module]
    while todo:
        path = source_of(todo.pop())
        for name in envhub_imports(path) if path else set():
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def test_resolving_an_id_reaches_no_machinery_above_the_registry() -> None:
    reached = reached_from("envhub.registration")
    above = sorted(name for name in reached if name.startswith(MACHINERY))
    assert not above, f"envhub.registration reaches {above}, above the registry"
    assert "envhub.core" in reached  # the reader reads


async def test_a_spec_is_built_without_its_lock_hash_and_an_episode_carries_it() -> None:
    spec = envhub.registration.spec("arithmetic-v0")
    assert spec.provenance.lock_hash is None  # `spec` and `make` read no plugin files
    pinned = current("arithmetic-v0").hash
    assert stamp(spec).provenance.lock_hash == pinned
    episodes = (await run_batch("arithmetic", OraclePolicy(), episodes=2, seed=0)).episodes
    assert [e.provenance.lock_hash for e in episodes] == [pinned, pinned]


SCHEMEPLUG = """
    import envhub

    class Echo(envhub.SingleTurnEnv):
        '''Says back where it was found.'''

        def __init__(self, where: str) -> None:
            super().__init__()
            self.where = where

        def setup(self, rng):
            return f"say {self.where}"

        @envhub.reward
        def said(self, answer):
            return float(answer.strip() == self.where)

    class Resolver:
        def make(self, env_id, *, max_turns, kwargs):
            env = Echo(env_id.removeprefix("toy://"))
            env.spec = self.spec(env_id)
            return env

        def spec(self, env_id):
            return envhub.EnvSpec(id=env_id, name=env_id.removeprefix("toy://"))

    resolver = Resolver()
"""


@pytest.fixture
def toy_scheme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    """`schemeplug-toys` as pip leaves it: a dist-info declaring the schemes `toy` and `broken`."""
    info = tmp_path / "schemeplug_toys-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: schemeplug-toys\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{SCHEME_GROUP}]\ntoy = schemeplug_toys:resolver\nbroken = schemeplug_missing:resolver\n"
    )
    (tmp_path / "schemeplug_toys.py").write_text(textwrap.dedent(SCHEMEPLUG))
    monkeypatch.syspath_prepend(str(tmp_path))
    return Registry()


async def test_a_url_scheme_is_made_by_the_plugin_that_declares_it(toy_scheme: Registry) -> None:
    env = toy_scheme.make("toy://far/away")
    assert env.spec is not None and env.spec.id == "toy://far/away"
    observation, _ = await env.reset(seed=0)
    assert "far/away" in str(observation)
    assert toy_scheme.spec("toy://x").name == "x"
    assert is_external("toy://x") and not is_external("arithmetic-v0")
    assert scheme_of("nosuch://x") is None
    with pytest.raises(PluginImportError, match=r"'broken' from plugin schemeplug-toys"):
        toy_scheme.make("broken://x")


def test_envhub_serves_its_own_urls_through_the_same_entry_points() -> None:
    declared = {ep.name: ep.value for ep in metadata.entry_points(group=SCHEME_GROUP)}
    assert {name: declared.get(name) for name in ("ws", "wss", "http", "https")} == dict.fromkeys(
        ("ws", "wss", "http", "https"), "envhub.serve.client:resolver"
    )
