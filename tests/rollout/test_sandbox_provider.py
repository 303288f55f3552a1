"""Every stored episode names the sandbox provider that ran it: the one the fleet failed over to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import envhub
import envhub.sandbox as sandbox
from envhub.messages import Message
from envhub.policies import load_policy
from envhub.rollout import rollout, run_batch
from envhub.sandbox.fleet import scheduler
from envhub.store import read_episodes


class FleetEcho(envhub.Env):
    """Opens its sandbox through the fleet and reports the isolation, as sandboxed envs do."""

    max_turns = 1

    def __init__(self) -> None:
        self.box: sandbox.Sandbox | None = None

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[envhub.Observation, dict[str, Any]]:
        if self.box is None:
            self.box = await sandbox.open("fleet")
        return [Message(role="user", content="say anything")], {
            "isolation": self.box.report().model_dump(mode="json")
        }

    async def step(self, action: envhub.Action) -> envhub.StepResult:
        assert self.box is not None
        ran = await self.box.exec("echo ok", timeout=30)
        return envhub.StepResult([], float(ran.stdout.strip() == "ok"), True, False, {})

    async def close(self) -> None:
        if self.box is not None:
            await self.box.close()


async def test_a_sandboxed_env_records_its_provider() -> None:
    result = await run_batch("tool-use", load_policy("oracle"), episodes=2)
    assert [e.sandbox_provider for e in result.episodes] == ["local", "local"]
    assert all(e.error is None for e in result.episodes)


async def test_the_provider_is_the_one_the_fleet_failed_over_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E2B is first in the order but has no key here, so it refuses: the episodes run on local, and say so
    (not "fleet", not "e2b"), in memory and in the stored batch."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    fleet = f'{{"providers": [{{"name": "e2b"}}, {{"name": "local"}}], "lease_dir": "{tmp_path / "leases"}"}}'
    monkeypatch.setenv("ENVHUB_FLEET", fleet)
    monkeypatch.setattr(scheduler, "_shared", None)  # a fleet made from this test's config
    envhub.register("fleet-echo-v0", FleetEcho, override=True)
    result = await rollout("fleet-echo-v0", load_policy("random:1"), episodes=2, out=tmp_path / "run")
    assert [e.sandbox_provider for e in result.episodes] == ["local", "local"]
    assert [e.reward for e in result.episodes] == [1.0, 1.0]
    assert [e.sandbox_provider for e in read_episodes(tmp_path / "run")] == ["local", "local"]


async def test_an_env_without_a_sandbox_records_none() -> None:
    result = await run_batch("arithmetic", load_policy("oracle"), episodes=1)
    assert result.episodes[0].sandbox_provider is None
