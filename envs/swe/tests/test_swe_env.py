# ruff: noqa: E501
from __future__ import annotations

import asyncio
import json

from envhub_swe.env import SWEMini

import envhub
from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy
from envhub.rollout import run_batch


def call(name: str, **args: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, dict(args), id=f"c_{name}")])


def test_entry_points_are_discovered() -> None:
    env = envhub.make("swe-mini", instance="mini__stats-1")
    assert env.spec is not None and env.spec.id == "swe-mini-v0"
    assert {t.name for t in env.tools} == {
        "bash",
        "view",
        "create",
        "str_replace",
        "insert",
        "search",
        "submit",
    }


def test_oracle_resolves() -> None:
    batch = asyncio.run(
        run_batch(
            "swe-mini",
            OraclePolicy(),
            episodes=2,
            seed=0,
            env_kwargs={"instance": ["mini__semver-1", "mini__textkit-2"]},
        )
    )
    assert len(batch.episodes) == 2
    for episode in batch.episodes:
        assert episode.error is None, episode.error
        assert episode.reward == 1.0, episode.reward_components


def test_tools_edit_the_repo_and_the_patch_is_the_diff() -> None:
    async def run() -> None:
        async with SWEMini(instance="mini__stats-2") as env:
            observation, info = await env.reset(seed=0)
            assert "median" in observation[-1].text and info["instance_id"] == "mini__stats-2"
            r = await env.step(call("view", path="stats/core.py", start_line=8, end_line=9))
            assert r.observation[0].text.splitlines()[0] == "     8\tdef median(values):"
            r = await env.step(call("search", pattern="def median"))
            assert "stats/core.py:8:def median(values):" in r.observation[0].text
            r = await env.step(call("view", path="../etc/passwd"))
            assert "outside the repository" in r.observation[0].text
            r = await env.step(call("bash", command="ls tests; git log --all --oneline | wc -l"))
            assert (
                "test_core.py" in r.observation[0].text and "\n1\n" in r.observation[0].text
            )  # no later history
            await env.step(
                call(
                    "str_replace",
                    path="stats/core.py",
                    old="    return ordered[len(ordered) // 2]\n",
                    new="    mid = len(ordered) // 2\n    if len(ordered) % 2:\n        return ordered[mid]\n",
                )
            )
            await env.step(
                call(
                    "insert",
                    path="stats/core.py",
                    line=12,
                    text="    return (ordered[mid - 1] + ordered[mid]) / 2",
                )
            )
            await env.step(call("create", path="NOTES.md", content="fixed median\n"))
            r = await env.step(call("submit"))
            assert r.terminated and r.reward == 1.0, (r.info, env.report and env.report.summary())
            assert "NOTES.md" in (env.patch or "") and "stats/core.py" in (env.patch or "")
            assert r.info["reward_components"]["fail_to_pass"] == 1.0

    asyncio.run(run())


def test_malformed_tool_arguments_are_answered() -> None:
    async def run() -> None:
        async with SWEMini(instance="mini__stats-1") as env:
            await env.reset(seed=0)
            bad = Message(
                role="assistant",
                tool_calls=[ToolCall(id="x", name="view", arguments=json.dumps({"path": 3}))],
            )
            r = await env.step(bad)
            assert not r.terminated and r.info["error"]["kind"] == "tool_error"
            r = await env.step(call("str_replace", path="stats/core.py", old="nope", new="x"))
            assert "occurs 0 times" in r.observation[0].text

    asyncio.run(run())
