"""`harbor:PATH`: Harbor task folders played end to end, on docker and on the local sandbox.

Each task folder of tests/data/harbor_tasks/ is written in Harbor's format (instruction.md, task.toml,
environment/Dockerfile, solution/solve.sh, tests/test.sh); its oracle must score 1.0 and an agent that
does nothing 0.0, on every runtime it can run on here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import envhub
from envhub.integrations.harbor.dockerfile import LocalRefused, local_plan
from envhub.integrations.harbor.env import main_reward, parse_rewards
from envhub.integrations.harbor.task import HarborTask, HarborTaskError, NetworkMode
from envhub.policies import OraclePolicy
from envhub.rollout.runner import run_episode
from envhub.sandbox import SandboxUnavailable
from tests.integrations.harbor.harbor_kit import PLAYS, TASKS, call, make, no_leaks, play_commands

pytestmark = pytest.mark.usefixtures(no_leaks.__name__)


@pytest.mark.parametrize(("task", "runtime"), PLAYS, ids=[f"{t}-{r}" for t, r in PLAYS])
async def test_the_oracle_solves_every_task_and_doing_nothing_scores_zero(task: str, runtime: str) -> None:
    env = make(task, runtime)
    async with env:
        episode = await run_episode(env, OraclePolicy(), seed=0)
        assert episode.error is None
        assert episode.reward == 1.0, env.reward_notes
        assert episode.isolation is not None and episode.isolation["backend"] == runtime

        await env.reset(seed=0)
        result = await env.step("I will not do anything.")
        assert result.terminated
        assert result.reward == 0.0, env.reward_notes
        assert result.info["reward_components"] == {"reward": 0.0}


def test_the_id_is_its_own_spec_and_the_task_folder_is_read_as_harbor_writes_it() -> None:
    spec = envhub.spec(f"harbor:{TASKS / 'edit-config'}")
    assert spec.id == f"harbor:{TASKS / 'edit-config'}"
    made = make("edit-config", "local")
    assert made.spec is not None and made.spec.id == spec.id and made.spec.max_turns == 50
    task = HarborTask(TASKS / "edit-config")
    env = task.config.environment
    # Terminal-Bench 2.0's legacy spellings, mapped as Harbor maps them.
    assert task.config.schema_version == "1.0"
    assert env.network_mode == NetworkMode.NO_NETWORK and not task.network
    assert (env.memory_mb, env.storage_mb, env.cpus) == (1024, 512, 1)
    assert task.config.verifier.timeout_sec == 120.0 and task.config.agent.timeout_sec == 300.0
    assert task.instruction.startswith("The service configuration lives in `/app/service.ini`")


async def test_the_task_limits_become_the_sandbox_policy() -> None:
    env = make("edit-config", "local")
    async with env:
        _, info = await env.reset(seed=0)
    policy = info["isolation"]["policy"]
    assert (policy["memory_mb"], policy["disk_mb"], policy["cpus"], policy["network"]) == (
        1024,
        512,
        1.0,
        False,
    )
    assert policy["workdir"] == "/app"
    assert info["workdir"] == "/app" and info["task"] == "edit-config"


async def test_the_agent_works_in_the_task_environment_and_the_tests_judge_its_state() -> None:
    """A hand-played fix, not the oracle's: the reward comes from the state the agent left."""
    env = make("fix-python-script", "docker")
    async with env:
        fix = (
            "python3 - <<'PY'\nsource = open('stats.py').read()\n"
            "source = source.replace('    middle = len(values) // 2\\n    return values[middle]',\n"
            "    '    s = sorted(values)\\n    m = len(s) // 2\\n'\n"
            "    '    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2')\n"
            "open('stats.py', 'w').write(source)\nPY"
        )
        assert await play_commands(env, "pwd && id -u && ls", fix) == 1.0
        first = env.messages[3].text  # the answer to `pwd && id -u && ls`
        assert "/app\n0\nstats.py" in first


async def test_reward_json_names_every_value_and_reward_is_the_episodes() -> None:
    env = make("hello-json", "local")
    async with env:
        reward = await play_commands(
            env, "printf 'echo \"Hello, Harbor!\"\\n' > /app/hello.sh"
        )  # not executable
        assert reward == 0.0
        assert env.rewards == {"reward": 0.0, "exists": 1.0, "executable": 0.0, "output": 0.0}


async def test_the_agent_time_limit_ends_the_episode_and_the_tests_still_run(tmp_path: Path) -> None:
    task = shutil.copytree(TASKS / "edit-config", tmp_path / "edit-config")
    toml = (
        (task / "task.toml").read_text().replace("[agent]\ntimeout_sec = 300.0", "[agent]\ntimeout_sec = 2.0")
    )
    (task / "task.toml").write_text(toml)
    env = envhub.make(f"harbor:{task}", runtime="local")
    async with env:
        await env.reset(seed=0)
        result = await env.step(call("bash", command="sleep 30", timeout=60))
        assert result.terminated and result.info["agent_timeout"] is True
        assert "[killed: timed out]" in result.observation[0].text
        assert result.reward == 0.0


def test_a_dockerfile_the_local_runtime_cannot_honour_is_refused_naming_the_line() -> None:
    with pytest.raises(LocalRefused, match=r"Dockerfile:4: `RUN mkdir -p /data.*only `RUN pip install"):
        make("order-total", "local")


async def test_a_base_image_missing_from_the_offline_engine_is_named(tmp_path: Path) -> None:
    task = shutil.copytree(TASKS / "hello-json", tmp_path / "hello-json")
    (task / "environment" / "Dockerfile").write_text("FROM envhub/never-loaded:0\nWORKDIR /app\n")
    env = envhub.make(f"harbor:{task}", runtime="docker")
    async with env:
        with pytest.raises(SandboxUnavailable, match=r"FROM envhub/never-loaded:0, which is not loaded"):
            await env.reset(seed=0)


def test_the_local_plan_follows_the_dockerfile(tmp_path: Path) -> None:
    plan = local_plan(TASKS / "pip-table" / "environment" / "Dockerfile")
    assert (plan.python, plan.workdir, plan.pip) == ("3.11", "/app", ["tabulate==0.10.0"])
    assert plan.copies == [("planets.csv", "/app/planets.csv")]
    plan = local_plan(TASKS / "fix-python-script" / "environment" / "Dockerfile")
    assert plan.env == {"PYTHONDONTWRITEBYTECODE": "1"} and plan.copies == [("src/", "/app")]
    refused = {
        "FROM ubuntu:24.04\nWORKDIR /app\n": "not a plain Python image",
        "FROM python:3.11\nWORKDIR /app\nRUN pip install -r req.txt\n": r"pip options \['-r'\]",
        "FROM python:3.11\nWORKDIR /app\nRUN pip install x && rm -rf /x\n": "shell operators",
        "FROM python:3.11\nCOPY x /etc/x\nWORKDIR /app\n": "outside WORKDIR",
        "FROM python:3.11\n": "needs a WORKDIR",
        "FROM python:3.11\nWORKDIR /app\nARG V=1\n": "ARG is not honoured",
    }
    (tmp_path / "x").write_text("x")
    for text, why in refused.items():
        (tmp_path / "Dockerfile").write_text(text)
        with pytest.raises(LocalRefused, match=why):
            local_plan(tmp_path / "Dockerfile")


@pytest.mark.parametrize(
    ("toml", "why"),
    [
        ('[[steps]]\nname = "one"\n', "multi-step"),
        ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["example.com"]\n', "allowlist"),
        ('[verifier]\nenvironment_mode = "separate"\n', "separate environment"),
        ('[agent]\nuser = "agent"\n', r"\[agent\].user"),
        ('[environment]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"\n', "must agree"),
        ("[environment]\ngpus = 1\n", "no GPUs"),
    ],
)
def test_what_envhub_cannot_honour_is_refused_by_name(tmp_path: Path, toml: str, why: str) -> None:
    task = shutil.copytree(TASKS / "hello-json", tmp_path / "task")
    (task / "task.toml").write_text(toml)
    with pytest.raises(HarborTaskError, match=why):
        HarborTask(task)


def test_rewards_are_read_as_harbors_verifier_reads_them() -> None:
    assert parse_rewards(None, b"0.75\n") == {"reward": 0.75}
    assert parse_rewards(json.dumps({"reward": 1, "style": 0.5}).encode(), b"0") == {
        "reward": 1.0,
        "style": 0.5,
    }
    assert parse_rewards(b"1", None) == {"reward": 1.0}
    for raw_json, raw_text, why in [
        (None, None, "neither"),
        (None, b"nan", "not a finite number"),
        (None, b"yes", "not a number"),
        (b'{"reward": "1"}', None, "not a finite number"),
        (b'{"reward": true}', None, "not a finite number"),
        (b"{}", None, "empty"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_rewards(raw_json, raw_text)
    assert main_reward({"reward": 0.5, "other": 1.0}) == 0.5
    assert main_reward({"score": 0.25}) == 0.25
    assert main_reward({"a": 1.0, "b": 1.0}) == 0.0
