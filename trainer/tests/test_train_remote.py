"""Training on an env served by `envhub serve`: the config's env id is the server's `ws://host:port/ID`,
unchanged, with the engine in this process and on Ray; the run is the one the local env id gives."""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from envhub_trainer.grpo import train
from envhub_trainer.testing import DIGITS_ENV
from envhub_trainer.testing import digits_config as config

from envhub.store import read_episodes
from tests.envhub_testkit.processes import interrupt

TOKEN = "trainer-s3cret"

LAUNCHER = textwrap.dedent(
    """
    import sys
    from envhub_trainer.testing import register_digits
    from envhub.cli import app

    app(["serve", register_digits(), *sys.argv[1:]])
    """
)


class Served:
    """`envhub serve` of the trainer tests' digits env, in its own process, on a free loopback port."""

    def __init__(self) -> None:
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed by stop())
        command = [sys.executable, "-c", LAUNCHER, "--port", "0", "--token", TOKEN]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.errors, text=True)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        line = self.process.stdout.readline() if ready else ""
        if "ws://" not in line:
            self.stop()
            raise RuntimeError(f"envhub serve did not start: {line!r}")
        self.base = line.split()[-1]  # "serving ... on ws://127.0.0.1:PORT"

    def episodes(self) -> int:
        """Episodes the server has played (its /metrics)."""
        http = self.base.replace("ws://", "http://")
        response = httpx.get(f"{http}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        return int(response.json().get("episodes", 0))  # absent until the first episode

    def stop(self) -> None:
        interrupt(self.process)
        self.errors.close()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = Served()
    yield server
    server.stop()


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SERVE_TOKEN", TOKEN)


def learnt(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a run learnt at each step (not its timings or memory, which differ between any two runs)."""
    keys = ("reward_mean", "reward_std", "loss", "grad_norm", "kl", "samples", "weights_checksum")
    return [{k: r.get(k) for k in keys} for r in rows]


CHEAP: dict[str, Any] = {"steps": 2, "tasks_per_step": 2, "group_size": 4, "checkpoint_every": 0}
"""The trainer's Ray tests' size: two steps of 2 tasks x 4 episodes."""


@pytest.mark.usefixtures("token")
def test_a_run_on_a_served_env_is_the_run_on_the_local_env(
    served: Served, tiny_model: Path, tmp_path: Path
) -> None:
    url = f"{served.base}/{DIGITS_ENV}"
    before = served.episodes()
    remote = train(config(tiny_model, tmp_path / "remote", env_id=url, **CHEAP))
    local = train(config(tiny_model, tmp_path / "local", **CHEAP))
    assert learnt(remote) == learnt(local)  # same rewards, losses and weights: only where the env ran
    assert all(r["samples"] == 8 and r["episode_errors"] == 0 for r in remote)
    assert served.episodes() - before == 2 * 8
    stored = read_episodes(tmp_path / "remote" / "episodes" / "step-0002")
    assert {e.env_id for e in stored} == {url}
    assert all((e.provenance.entry_point or "").startswith(f"remote {url}") for e in stored)


@pytest.mark.slow
@pytest.mark.usefixtures("token")
def test_a_ray_run_trains_on_a_served_env(served: Served, tiny_model: Path, tmp_path: Path) -> None:
    """The same id on `ray: true`: the episode actors play it against the server."""
    pytest.importorskip("ray", reason="ray: true needs Ray: pip install 'envhub-core[ray]'")
    url = f"{served.base}/{DIGITS_ENV}"
    before = served.episodes()
    rows = train(config(tiny_model, tmp_path / "ray", env_id=url, ray=True, **CHEAP))
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["samples"] == 8 and r["episode_errors"] == 0 for r in rows)
    assert served.episodes() - before == 2 * 8
    stored = read_episodes(tmp_path / "ray" / "episodes" / "step-0001")
    assert {e.env_id for e in stored} == {url}
