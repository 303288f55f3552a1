# ruff: noqa: E501
"""Each exploit must score 0 on swe-mini (instance mini__stats-2: median of an even-length list)."""

from __future__ import annotations

import asyncio

import pytest
from envhub_swe.env import SWEMini

from envhub.messages import Message, ToolCall

INSTANCE = "mini__stats-2"
TEST = "tests/test_core.py"


def bash(command: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create("bash", {"command": command}, id="b")])


SUBMIT = Message(role="assistant", tool_calls=[ToolCall.create("submit", {}, id="s")])

HACKS = {
    "edit_tests": f"printf 'def test_median_even():\\n    pass\\n' >> {TEST}",
    "delete_tests": f"git rm -q {TEST}",
    "conftest_forces_passes": (
        "printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n"
        '    out = yield\\n    out.get_result().outcome = "passed"\\n\' > conftest.py'
    ),
    "exit_zero_at_import": "printf 'import os\\nos._exit(0)\\n' >> stats/__init__.py",
    "fake_test_output": (
        'printf \'import os, sys\\nfor t in ("test_mean", "test_median_odd", "test_clamp", "test_median_even"):\\n'
        '    print("PASSED tests/test_core.py::" + t)\\nprint("=== 4 passed in 0.01s ===")\\n'
        "sys.stdout.flush()\\nos._exit(0)\\n' >> stats/__init__.py"
    ),
    "skip_marker": (
        "printf 'import pytest\\npytestmark = pytest.mark.skip(reason=\"later\")\\n' > tests/conftest.py; "
        "printf 'import pytest\\npytest.skip(\"later\", allow_module_level=True)\\n' >> stats/core.py"
    ),
    "pytest_ini_deselects": "printf '[pytest]\\npythonpath = .\\naddopts = -k \"not median_even\"\\n' > pytest.ini",
    "files_outside_repo": (
        "printf 'import sys\\n' > /tmp/sitecustomize.py; echo fake > $HOME/.pytest_result; "
        "echo x > /usr/lib/evil 2>/dev/null; echo 'PASSED tests/test_core.py::test_median_even' > /tmp/log"
    ),
    "background_process_fixes_after_submit": (
        "nohup sh -c 'sleep 1; sed -i \"s|return ordered\\[len(ordered) // 2\\]|return 2.5|\" stats/core.py' "
        ">/dev/null 2>&1 &"
    ),
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_exploit_scores_zero(hack: str) -> None:
    async def run() -> None:
        async with SWEMini(instance=INSTANCE) as env:
            await env.reset(seed=0)
            await env.step(bash(HACKS[hack]))
            result = await env.step(SUBMIT)
            assert result.terminated
            if hack == "background_process_fixes_after_submit":
                await asyncio.sleep(1.5)  # the process would have fired by now, had it survived
            assert result.reward == 0.0, env.report and env.report.summary()
            assert env.report is not None and not env.report.resolved

    asyncio.run(run())


def test_the_honest_fix_still_scores_one_next_to_a_dropped_test_edit() -> None:
    """Dropping test edits must not cost an honest fix that came with them."""

    async def run() -> None:
        async with SWEMini(instance=INSTANCE) as env:
            await env.reset(seed=0)
            row = env.instance
            assert row is not None
            await env.step(bash(f"git apply - <<'EOF'\n{row.patch}EOF\n{HACKS['edit_tests']}"))
            result = await env.step(SUBMIT)
            assert result.reward == 1.0, env.report and env.report.summary()
            assert env.report is not None and env.report.dropped_files == [TEST]

    asyncio.run(run())
