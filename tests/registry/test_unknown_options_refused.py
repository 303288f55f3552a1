"""One rule for options: keywords an env does not take are refused by `make`, and `reset` options it
does not declare are refused by `reset`, each naming the valid ones, for a local env, a served env
(`ws://`, against a real `envhub serve`) and a foreign-format env alike.

The reset options an env reads are declared (`Env.reset_options`), not guessed: code-single reads
`options["task"]` and says so; arithmetic reads none.
"""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import envhub
from envhub.core import UnknownOptionError
from envhub.integrations.gymnasium import to_gymnasium
from tests.envhub_testkit.processes import interrupt

HARBOR_TASK = Path(__file__).parents[1] / "data" / "harbor_tasks" / "hello-json"


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """`envhub serve arithmetic code-single` as a user starts it; its websocket base URL."""
    command = [sys.executable, "-m", "envhub", "serve", "arithmetic", "code-single", "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 60)
    line = process.stdout.readline() if ready else ""
    try:
        assert "ws://" in line, f"envhub serve did not start: {line!r}"
        yield line.split()[-1]
    finally:
        interrupt(process)


def test_a_local_env_refuses_an_unknown_keyword_at_make_naming_its_options() -> None:
    with pytest.raises(UnknownOptionError, match=r"arithmetic-v0 has no option 'stpes'; its options: steps"):
        envhub.make("arithmetic", stpes=2)
    assert envhub.spec("arithmetic").options == ["steps"]


def test_a_served_env_refuses_an_unknown_keyword_at_make_as_the_local_one_does(served: str) -> None:
    with pytest.raises(UnknownOptionError, match=r"/arithmetic-v0 has no option 'stpes'; its options: steps"):
        envhub.make(f"{served}/arithmetic", stpes=2)  # before any session is opened
    assert envhub.spec(f"{served}/arithmetic").options == ["steps"]


@pytest.mark.parametrize(
    ("env_id", "valid"),
    [(f"harbor:{HARBOR_TASK}", "runtime"), ("openenv:http://127.0.0.1:9", "timeout")],
)
def test_a_foreign_format_env_refuses_an_unknown_keyword_at_make(env_id: str, valid: str) -> None:
    with pytest.raises(UnknownOptionError, match=rf"has no option 'bogus'; its options: {valid}"):
        envhub.make(env_id, bogus=1)  # refused before the task is read or the server is asked


async def test_reset_refuses_options_the_env_does_not_declare() -> None:
    async with envhub.make("arithmetic") as env:
        with pytest.raises(UnknownOptionError, match="takes no reset option 'task'; its reset options: none"):
            await env.reset(seed=0, options={"task": "rotate-04"})
        observation, _ = await env.reset(seed=0)  # the env is still usable
        assert observation
    with pytest.raises(UnknownOptionError, match="reset option 'bogus'"):
        to_gymnasium(envhub.make("arithmetic")).reset(seed=0, options={"bogus": 1})


async def test_declared_reset_options_are_taken_and_named_in_the_spec() -> None:
    assert set(envhub.spec("code-single").reset_options or {}) == {"task"}
    async with envhub.make("code-single") as env:
        observation, _ = await env.reset(seed=0, options={"task": "rotate-04"})
        assert "rotate" in observation[-1].text.lower()
        with pytest.raises(UnknownOptionError, match="reset option 'tsak'; its reset options: task"):
            await env.reset(seed=0, options={"tsak": "rotate-04"})


async def test_a_served_env_refuses_undeclared_reset_options_before_opening_a_session(served: str) -> None:
    async with envhub.make(f"{served}/arithmetic") as env:
        with pytest.raises(UnknownOptionError, match="reset option 'task'; its reset options: none"):
            await env.reset(seed=0, options={"task": "x"})
    async with envhub.make(f"{served}/code-single") as env:
        observation, _ = await env.reset(seed=0, options={"task": "rotate-04"})
        assert "rotate" in observation[-1].text.lower()


def test_a_rollout_of_a_served_env_refuses_an_unknown_keyword_before_its_first_episode(
    served: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "envhub", "rollout", f"{served}/arithmetic", "--policy", "oracle"]
    command += ["--episodes", "2", "--kwarg", "stpes=2", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "has no option 'stpes'; its options: steps" in result.stdout + result.stderr
    assert not list(out.glob("**/*.parquet")), "no episode may be stored for a batch refused up front"
