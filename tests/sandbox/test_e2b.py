"""The e2b backend through the real `e2b` / `e2b-code-interpreter` client against a local double of E2B
(tests/sandbox/e2b_double): the control plane and envd at the wire, commands run as real processes.

Every E2B failure must reach envhub as a `SandboxError` (infrastructure: the runner retries the episode)
and never as something the agent did; a command's exit code and timeout are the agent's results.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import SandboxQuery
from e2b_code_interpreter import AsyncSandbox

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, SandboxError, SandboxUnavailable
from envhub.sandbox.e2b import HOST_LABEL, LABEL, OWNER_LABEL, E2BSandbox
from envhub.sandbox.results import SandboxTimeout
from tests.sandbox.e2b_double import E2BDouble, bwrap_missing, serving

pytestmark = [
    pytest.mark.skipif(bwrap_missing() is not None, reason=bwrap_missing() or ""),
    pytest.mark.timeout(120),
]


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> Iterator[E2BDouble]:
    """The double, and the SDK pointed at it by the settings it reads itself."""
    with serving(monkeypatch) as fake:
        yield fake


def _no_sandbox_left(double: E2BDouble) -> None:
    assert double.live() == [], "a sandbox was left running (billed until it expires)"
    assert not any(p.alive for p in double.processes())


async def test_open_exec_files_close(double: E2BDouble, tmp_path: Path) -> None:
    policy = IsolationPolicy(network=False, env={"A": "1"}, wall_time_s=30)
    async with sandbox.open("e2b", policy=policy, image="my-template") as sb:
        (created,) = double.seen("control", "POST", "/v2/sandboxes")
        assert created.body["templateID"] == "my-template" and created.body["allow_internet_access"] is False
        assert created.body["envVars"] == {"A": "1"} and created.body["timeout"] >= 30

        r = await sb.exec('echo "$A $B"; pwd; echo err >&2', env={"B": "2"})
        assert r.ok and r.stdout == "1 2\n/work\n" and r.stderr == "err\n"
        r = await sb.exec(["sh", "-c", "exit 3"])
        assert r.exit_code == 3 and not r.timed_out
        r = await sb.exec("cat", stdin="fed through a file")
        assert r.stdout == "fed through a file"
        await sb.exec("mkdir -p sub")
        assert (await sb.exec("pwd", cwd="sub")).stdout == "/work/sub\n"

        await sb.write_file("notes.txt", "hi")
        assert await sb.read_file("/work/notes.txt") == b"hi"
        assert (await sb.exec("cat notes.txt")).stdout == "hi"  # the file is where commands see it
        with pytest.raises(FileNotFoundError):
            await sb.read_file("missing")

        (tmp_path / "up").mkdir()
        (tmp_path / "up" / "a.txt").write_text("uploaded")
        await sb.upload_dir(tmp_path / "up", "proj")
        await sb.download("proj", tmp_path / "down")
        assert (tmp_path / "down" / "a.txt").read_text() == "uploaded"
        sandbox_id = sb.report().details["sandbox_id"]
    assert double.seen("control", "DELETE", f"/sandboxes/{sandbox_id}")
    _no_sandbox_left(double)


async def test_auto_selects_e2b_when_the_key_is_set(double: E2BDouble) -> None:
    async with sandbox.open("auto") as sb:
        assert sb.backend == "e2b"
        report = sb.report()
    assert not report.fully_enforced and "memory" in report.unenforced()


async def test_requests_carry_the_keys_e2b_issued(double: E2BDouble) -> None:
    async with sandbox.open("e2b") as sb:
        await sb.exec("true")
        sandbox_id = sb.report().details["sandbox_id"]
    (create,) = double.seen("control", "POST", "/v2/sandboxes")
    assert create.headers["x-api-key"] == double.api_key
    token = double.sandboxes[sandbox_id].envd_token
    envd = double.seen("envd", "POST", "/process.Process/Start")
    assert envd and all(r.headers["x-access-token"] == token for r in envd)
    assert all(r.headers["e2b-sandbox-id"] == sandbox_id for r in envd)


async def test_created_sandboxes_carry_the_reaper_labels(double: E2BDouble) -> None:
    """A reaper finds envhub's sandboxes by metadata, through the SDK's own list call."""
    async with sandbox.open("e2b") as sb:
        sandbox_id = sb.report().details["sandbox_id"]
        paginator = AsyncSandbox.list(query=SandboxQuery(metadata={LABEL: "1"}))
        found = await paginator.next_items()
        assert [s.sandbox_id for s in found] == [sandbox_id]
        assert found[0].metadata[OWNER_LABEL] == str(os.getpid()) and found[0].metadata[HOST_LABEL]


async def test_a_timed_out_command_is_killed_in_the_sandbox(double: E2BDouble) -> None:
    """envd keeps a command running when its stream ends; envhub must kill it at the limit."""
    async with sandbox.open("e2b") as sb:
        r = await sb.exec("sleep 60", timeout=1)
        assert r.timed_out and r.exit_code == -1
        # The kill is sent before exec returns; the double reaps the process on its own loop a moment
        # later, so look for up to 10 s (the command itself would run for 60).
        for _ in range(200):
            if not [p for p in double.processes() if p.alive]:
                break
            await asyncio.sleep(0.05)
        assert not [p for p in double.processes() if p.alive], "the timed-out command still runs"
        assert (await sb.exec("echo still usable")).stdout == "still usable\n"


async def test_a_sandbox_killed_under_a_command_is_an_infrastructure_error(double: E2BDouble) -> None:
    """Not a timeout shown to the agent: the SDK raises "not running" as a TimeoutException subclass."""
    async with sandbox.open("e2b") as sb:
        command = asyncio.create_task(sb.exec("sleep 60", timeout=30))
        for _ in range(600):  # until the command runs in the sandbox
            if any(p.alive and "sleep 60" in p.args[-1] for p in double.processes()):
                break
            await asyncio.sleep(0.05)
        double.kill_sandbox(sb.report().details["sandbox_id"])
        with pytest.raises(SandboxError, match="gone"):
            await command
        with pytest.raises(SandboxError, match="gone"):
            await sb.exec("true")


CONTROL_ERRORS = [
    pytest.param(400, "invalid template", SandboxError, id="400"),
    pytest.param(404, "template 'x' not found", SandboxError, id="404"),
    pytest.param(409, "conflict", SandboxError, id="409"),
    pytest.param(500, "internal error", SandboxError, id="500"),
    pytest.param(503, "service busy", SandboxError, id="503"),
    pytest.param(401, "Invalid API key", SandboxUnavailable, id="401"),
]


@pytest.mark.parametrize(("status", "message", "kind"), CONTROL_ERRORS)
async def test_control_plane_errors_map_to_envhub_errors(
    double: E2BDouble, status: int, message: str, kind: type[Exception]
) -> None:
    double.fail(
        "control", "POST", "/v2/sandboxes", status=status, body={"code": status, "message": message}, times=9
    )
    with pytest.raises(kind) as raised:
        await sandbox.open("e2b")
    assert isinstance(raised.value, SandboxError)  # infrastructure, never the agent's doing
    if status != 503:  # the SDK words its 503 itself
        assert message in str(raised.value)
    _no_sandbox_left(double)


async def test_rate_limit_is_waited_out_as_retry_after_says(double: E2BDouble) -> None:
    double.fail(
        "control",
        "POST",
        "/v2/sandboxes",
        status=429,
        body={"code": 429, "message": "rate limit exceeded"},
        headers={"Retry-After": "1"},
    )
    async with sandbox.open("e2b") as sb:
        assert (await sb.exec("echo ok")).stdout == "ok\n"
    first, second = double.seen("control", "POST", "/v2/sandboxes")
    assert second.at - first.at >= 1.0  # the SDK waited as told, then created the sandbox


async def test_a_persistent_rate_limit_is_an_infrastructure_error(double: E2BDouble) -> None:
    double.fail(
        "control",
        "POST",
        "/v2/sandboxes",
        status=429,
        body={"code": 429, "message": "rate limit exceeded"},
        headers={"Retry-After": "3600"},  # longer than the request may take: the SDK gives up at once
        times=9,
    )
    with pytest.raises(SandboxError, match="Rate limit"):
        await sandbox.open("e2b")
    assert len(double.seen("control", "POST", "/v2/sandboxes")) == 1


@pytest.mark.timeout(30)
async def test_a_hanging_control_plane_is_a_sandbox_timeout(double: E2BDouble) -> None:
    double.fail("control", "POST", "/v2/sandboxes", hang=True)
    with pytest.raises(SandboxTimeout):
        await E2BSandbox.create(IsolationPolicy(), request_timeout=2)


async def test_envd_failures_are_infrastructure_errors(double: E2BDouble) -> None:
    async with sandbox.open("e2b") as sb:
        double.fail("envd", "POST", "/files", status=507, body={"code": 507, "message": "not enough space"})
        # The double answers before it has read the upload; under load the SDK may see that as a dropped
        # connection instead of the 507's body. Either way it is the infrastructure's failure.
        with pytest.raises(SandboxError, match=r"not enough space|connection error"):
            await sb.write_file("big.bin", b"x")
        double.fail("envd", "GET", "/files", status=429, body={"code": 429, "message": "slow down"}, times=9)
        with pytest.raises(SandboxError, match="rate limited"):
            await sb.read_file("any.txt")
        double.fail(
            "envd", "POST", "/process.Process/Start", status=500, body={"code": 500, "message": "envd broke"}
        )
        with pytest.raises(SandboxError, match="envd broke"):
            await sb.exec("true")


async def test_a_workdir_that_cannot_be_made_fails_the_open_and_kills_the_sandbox(double: E2BDouble) -> None:
    with pytest.raises(SandboxError, match="workdir"):
        await sandbox.open("e2b", policy=IsolationPolicy(workdir="/etc/envhub-work"))
    _no_sandbox_left(double)


async def test_reading_a_directory_is_the_callers_error(double: E2BDouble) -> None:
    async with sandbox.open("e2b") as sb:
        with pytest.raises(IsADirectoryError):
            await sb.read_file("/work")


async def test_a_wrong_key_is_refused_as_unavailable(
    double: E2BDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2B_API_KEY", "e2b_" + base64.b16encode(b"wrong").decode())
    with pytest.raises(SandboxUnavailable, match="API key"):
        await sandbox.open("e2b")
    _no_sandbox_left(double)


async def test_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(SandboxUnavailable, match="E2B_API_KEY"):
        await sandbox.open("e2b")
