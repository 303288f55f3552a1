"""Which sandbox an env needs is declared once, on its registration, and read by one rule.

`envhub.registration.sandbox_kind` joins the declaration with the env's `backend` option; the runner's
`backend_concurrency` caps, the Ray backend and the lock all read it, so `--kwarg backend=docker` is
counted against the docker cap and an env registered by a third party with a sandbox is read as such.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

import envhub
from envhub.lock.lockfile import current
from envhub.policies import OraclePolicy
from envhub.registration import registry, sandbox_kind
from envhub.rollout import RolloutLimits, run_batch
from envhub.rollout.ray_runner import _sandbox_of


class Boxed(envhub.SingleTurnEnv):
    """Counts how many of its episodes are in flight at once (a class-wide figure)."""

    in_flight = 0
    most = 0

    def __init__(self, backend: str = "none") -> None:
        super().__init__()
        self.backend = backend

    async def setup(self, rng: random.Random) -> str:
        type(self).in_flight += 1
        type(self).most = max(type(self).most, type(self).in_flight)
        await asyncio.sleep(0.05)  # long enough for every uncapped worker to be in an episode too
        return "Say ok."

    @envhub.reward
    async def said(self, answer: str) -> float:
        type(self).in_flight -= 1
        return float(answer.strip() == "ok")

    def reference_action(self, messages: list[envhub.Message]) -> str:
        return "ok"


@pytest.fixture
def boxed() -> Iterator[type[Boxed]]:
    """`r30-plain/boxed-v0` declares no sandbox, `r30-thirdparty/boxed-v0` declares docker, as a
    third-party package's `register()` call would; both leave the shared registry as they found it."""
    envhub.register("r30-plain/boxed-v0", Boxed)
    envhub.register("r30-thirdparty/boxed-v0", Boxed, sandbox="docker")
    envhub.register("r30-thirdparty/local-v0", Boxed, sandbox="local")
    Boxed.in_flight = Boxed.most = 0
    yield Boxed
    for env_id in ("r30-plain/boxed-v0", "r30-thirdparty/boxed-v0", "r30-thirdparty/local-v0"):
        registry._registrations.pop(env_id)


CAPPED = RolloutLimits(concurrency=4, backend_concurrency={"docker": 1})


async def test_a_backend_option_is_counted_against_its_cap(boxed: type[Boxed]) -> None:
    result = await run_batch(
        "r30-plain/boxed-v0", OraclePolicy(), episodes=4, limits=CAPPED, env_kwargs={"backend": "docker"}
    )
    assert [e.reward for e in result.episodes] == [1.0] * 4
    assert boxed.most == 1  # the docker cap held, though the registration declares no sandbox


async def test_without_the_option_the_cap_does_not_apply(boxed: type[Boxed]) -> None:
    """The control: the same batch, uncapped, does run episodes side by side."""
    await run_batch("r30-plain/boxed-v0", OraclePolicy(), episodes=4, limits=CAPPED)
    assert boxed.most > 1


async def test_a_third_party_registration_declares_its_sandbox(boxed: type[Boxed]) -> None:
    spec = envhub.spec("r30-thirdparty/boxed-v0")
    assert spec.provenance.default_sandbox == "docker"
    await run_batch("r30-thirdparty/boxed-v0", OraclePolicy(), episodes=4, limits=CAPPED)
    assert boxed.most == 1


def test_the_ray_runner_and_the_lock_read_the_same_rule(boxed: type[Boxed]) -> None:
    assert _sandbox_of("r30-thirdparty/boxed-v0", {}) == "docker"
    assert _sandbox_of("r30-plain/boxed-v0", {"backend": "docker"}) == "docker"
    assert _sandbox_of("r30-thirdparty/boxed-v0", {"backend": "none"}) == "none"
    assert current("r30-thirdparty/local-v0").components["sandbox"].parts["kind"] == "local"
    assert current("r30-thirdparty/local-v0", {"backend": "none"}).components["sandbox"].parts == {
        "kind": "none"
    }
    assert current("r30-plain/boxed-v0").components["sandbox"].parts == {"kind": "none"}


def test_the_rule_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sandbox_kind(None, {}) == "none"
    assert sandbox_kind("docker", {}) == "docker"
    assert sandbox_kind("docker", {"backend": "local"}) == "local"
    assert sandbox_kind("docker", {"backend": "not-a-sandbox"}) == "docker"  # another meaning of the word
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    assert sandbox_kind("none", {"backend": "auto"}) == "local"
    monkeypatch.setenv("E2B_API_KEY", "e2b_test")
    assert sandbox_kind("none", {"backend": "auto"}) == "e2b"


def test_register_refuses_an_unknown_sandbox() -> None:
    with pytest.raises(ValueError, match=r"unknown sandbox 'dockr'.*docker"):
        envhub.register("r30-typo/boxed-v0", Boxed, sandbox="dockr")  # type: ignore[arg-type]
