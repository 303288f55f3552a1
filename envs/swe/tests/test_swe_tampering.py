"""In-process tampering payloads (envs/swe/tests/tampering/) must score 0 on swe-mini.

Each payload is code a submission appends to the repository's own package `__init__.py`, which the
tests import: it runs inside the test runner's process and tries to make the grade 1.0 with no bug
fixed (reporting patches, canary dodging, test swapping, caller-frame answers, tracing, builtins,
ctypes, delayed execution). The default suite plays each payload once, locally, on an instance that
rotates with the payload's index (so the 12 instances and both runners, pytest and unittest, are
covered across payloads), with the diff monitor's penalty off, so the runner-side defenses are what
is tested; a few payloads run on docker too. `benchmarks/swe_tampering.py` plays the whole matrix.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envhub.messages import Message, ToolCall

TAMPERING = Path(__file__).parent / "tampering"
PAYLOADS = {path.stem: path for path in sorted(TAMPERING.glob("p[0-9][0-9]_*.py"))}
INSTANCES = tuple(
    f"mini__{repo}-{n}" for n in (1, 2, 3) for repo in ("stats", "kvstore", "textkit", "semver")
)
"""Ordered so that consecutive payloads alternate between the pytest and the unittest repositories."""
MARKER = "ENVHUB_TAMPERING_PAYLOAD"
FIND_PACKAGE = (
    'pkg=$(for f in */__init__.py src/*/__init__.py; do case "$f" in tests/*|test/*|testing/*) ;; '
    '*) [ -f "$f" ] && echo "$f" ;; esac; done | head -n 1)\n'
)


def append_command(source: str) -> str:
    """The agent's bash action: append `source` to the repository's first non-test package."""
    return f"{FIND_PACKAGE}cat >> \"$pkg\" <<'{MARKER}'\n\n{source}\n{MARKER}\n"


def _call(name: str, arguments: dict[str, str]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, arguments, id=name)])


async def play(
    payload: str, instance: str, runtime: str = "local", *, monitor_penalty: bool = False
) -> tuple[float, str]:
    """One episode: append the payload, submit. Returns the reward and the episode's reward notes."""
    from envhub_swe.env import SWEMini

    options: dict[str, object] = {"instance": instance, "runtime": runtime}
    if not monitor_penalty:
        options["monitor_penalty"] = False
    async with SWEMini(**options) as env:
        await env.reset(seed=0)
        await env.step(_call("bash", {"command": append_command(PAYLOADS[payload].read_text())}))
        result = await env.step(_call("submit", {}))
        assert result.terminated
        notes = dict(env.reward_notes)
        return float(result.reward), "; ".join(f"{k}: {v}" for k, v in notes.items())


def _rotating() -> list[tuple[str, str]]:
    return [(name, INSTANCES[i % len(INSTANCES)]) for i, name in enumerate(PAYLOADS)]


def test_the_suite_has_a_dozen_payloads_each_documented() -> None:
    assert len(PAYLOADS) >= 12
    for path in PAYLOADS.values():
        source = path.read_text()
        assert '"""Tampering payload' in source, f"{path.name} must say what it does in its docstring"
        compile(source, str(path), "exec")  # appended as is to a package: it must be valid on its own


@pytest.mark.slow
@pytest.mark.parametrize(("payload", "instance"), _rotating())
def test_payload_scores_zero(payload: str, instance: str) -> None:
    reward, notes = asyncio.run(play(payload, instance))
    assert reward == 0.0, f"{payload} scored {reward} on {instance} (local): {notes}"


DOCKER = ("p02_report_objects", "p07_caller_frame_getframe", "p14_ctypes_exception_types")


@pytest.mark.slow
@pytest.mark.parametrize("payload", DOCKER)
def test_payload_scores_zero_on_docker(payload: str) -> None:
    from envhub_swe.runtime import MINI_IMAGE

    from envhub.sandbox.workspace import image_present

    if not image_present(MINI_IMAGE):
        pytest.skip(f"docker: the image {MINI_IMAGE} is not present (sandboxes/ci-setup.sh builds it)")
    instance = INSTANCES[sorted(PAYLOADS).index(payload) % len(INSTANCES)]
    reward, notes = asyncio.run(play(payload, instance, "docker"))
    assert reward == 0.0, f"{payload} scored {reward} on {instance} (docker): {notes}"
