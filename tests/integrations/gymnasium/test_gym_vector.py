"""gymnasium's own vector and registry utilities over envhub envs, run as a user runs them.

Each case runs in a fresh interpreter with a deadline: a vector env whose workers hang (the fork case
before its fix) must fail the test, not stall the suite.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any, cast

import pytest

import envhub
from envhub.integrations.gymnasium import gymnasium_id

DEADLINE = 300.0  # seconds; generous for a loaded 2-core machine, only ever reached by a hang


def plugin_ids() -> set[str]:
    """The gymnasium names of every id a plugin declares (not those other tests registered here)."""
    registrations = envhub.registry.registrations().items()
    return {gymnasium_id(i) for i, r in registrations if r.origin.startswith("plugin ")}


VECTOR = """
import json, sys
import envhub
from envhub.integrations.gymnasium import to_gymnasium
from gymnasium.vector import AsyncVectorEnv

method = sys.argv[1]
env = AsyncVectorEnv([lambda: to_gymnasium(envhub.make("arithmetic")) for _ in range(2)], context=method)
observations, _ = env.reset(seed=[1, 2])
assert all("What is the result?" in text for text in observations), observations
call = '<tool_call>{"name": "add", "arguments": {"a": 40, "b": 2}}</tool_call>'
observations, rewards, terminated, truncated, _ = env.step((call, "I think it is 7."))
env.close()
print(json.dumps({"observations": list(observations), "terminated": terminated.tolist()}))
"""


def run_python(code: str, *args: str) -> str:
    """Run `code` in a fresh interpreter; its stdout, or a failure showing its stderr."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=DEADLINE
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {DEADLINE:.0f} s: the vector env's workers hang")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_async_vector_env_works_with_either_start_method(method: str) -> None:
    out = json.loads(run_python(VECTOR, method).splitlines()[-1])
    # text beyond gymnasium's default character set (<, >, newlines, spaces) crosses shared memory intact
    assert out["observations"][0] == "<tool_response>\n42\n</tool_response>"
    assert out["terminated"] == [False, True]  # the plain answer ends the second episode


def test_unicode_text_survives_shared_memory() -> None:
    from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

    from envhub.integrations.gymnasium.env import UnicodeText

    space = UnicodeText(16, min_length=0)
    memory = create_shared_memory(space, n=2)

    def write(index: int, value: str) -> None:
        write_to_shared_memory(space, index, cast(Any, value), memory)

    texts: Any = read_from_shared_memory(space, memory, n=2)  # read once, as AsyncVectorEnv does
    assert tuple(texts) == ("", "")
    write(1, "naïve → 😀 <x>\n")
    write(0, "a\x00b")  # NUL is a character, not padding
    assert copy.deepcopy(texts) == ("a\x00b", "naïve → 😀 <x>\n")
    write(1, "ok")  # a shorter text leaves nothing of the longer one
    assert texts[1] == "ok"


REGISTRY = """
import json
import {first}, {second}
import gymnasium

env = gymnasium.make("envhub/arithmetic-v0", steps=1, render_mode="ansi")
observation, info = env.reset(seed=0)
assert "What is the result?" in observation and env.render().startswith("[system]")
env.close()
print(json.dumps(sorted(gymnasium.registry)))
"""


def test_gymnasium_make_finds_every_envhub_id_through_the_adapter_module() -> None:
    listed = json.loads(
        run_python(REGISTRY.format(first="gymnasium", second="envhub.integrations.gymnasium.env"))
    )
    assert plugin_ids() <= set(listed)


@pytest.mark.parametrize("order", [("envhub", "gymnasium"), ("gymnasium", "envhub")])
def test_gymnasium_make_finds_every_envhub_id_once_envhub_is_imported(order: tuple[str, str]) -> None:
    listed = json.loads(run_python(REGISTRY.format(first=order[0], second=order[1])))
    assert plugin_ids() <= set(listed)


def test_make_vec_builds_async_envs_from_the_gymnasium_id() -> None:
    code = """
import gymnasium, envhub.integrations.gymnasium.env
env = gymnasium.make_vec("envhub/guess-number-v0", num_envs=2, vectorization_mode="async")
observations, _ = env.reset(seed=3)
env.close()
print(len(observations))
"""
    assert run_python(code).strip() == "2"
