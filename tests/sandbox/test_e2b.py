"""The e2b backend up to the wire: the service is unreachable here, so the SDK is stubbed and the test
checks what envhub asks for and how it maps the SDK's results, errors and timeouts."""

from __future__ import annotations

from typing import Any, ClassVar

import e2b
import e2b_code_interpreter
import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, SandboxError, SandboxUnavailable


class FakeCommands:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.next: Any = None

    async def run(self, cmd: str, **kwargs: Any) -> Any:
        self.calls.append({"cmd": cmd, **kwargs})
        outcome, self.next = self.next, None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome or type("R", (), {"stdout": "out\n", "stderr": "", "exit_code": 0})()


class FakeFiles:
    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}

    async def write(self, path: str, data: str | bytes) -> None:
        self.store[path] = data.encode() if isinstance(data, str) else data

    async def read(self, path: str, format: str = "text") -> bytes:
        if path not in self.store:
            raise e2b.NotFoundException(f"{path} not found")
        return self.store[path]


class FakeRemote:
    created: ClassVar[list[dict[str, Any]]] = []

    def __init__(self) -> None:
        self.commands = FakeCommands()
        self.files = FakeFiles()
        self.sandbox_id = "sbx-test"
        self.killed = False

    @classmethod
    async def create(cls, **kwargs: Any) -> FakeRemote:
        cls.created.append(kwargs)
        return cls()

    async def kill(self) -> None:
        self.killed = True


@pytest.fixture
def fake_e2b(monkeypatch: pytest.MonkeyPatch) -> type[FakeRemote]:
    monkeypatch.setenv("E2B_API_KEY", "e2b_test_key")
    monkeypatch.setattr(e2b_code_interpreter, "AsyncSandbox", FakeRemote)
    FakeRemote.created = []
    return FakeRemote


async def test_creation_request_follows_the_policy(fake_e2b: type[FakeRemote]) -> None:
    policy = IsolationPolicy(network=False, env={"A": "1"}, wall_time_s=30)
    async with sandbox.open("e2b", policy=policy, image="my-template") as sb:
        remote = sb._remote  # type: ignore[attr-defined]
        assert remote.commands.calls[0]["cmd"] == "mkdir -p /work"
    request = fake_e2b.created[0]
    assert request["template"] == "my-template" and request["api_key"] == "e2b_test_key"
    assert request["allow_internet_access"] is False and request["envs"] == {"A": "1"}
    assert request["timeout"] >= 30
    assert remote.killed


async def test_auto_selects_e2b_when_the_key_is_set(fake_e2b: type[FakeRemote]) -> None:
    async with sandbox.open("auto") as sb:
        assert sb.backend == "e2b"
        report = sb.report()
    assert not report.fully_enforced and "memory" in report.unenforced()


async def test_exec_maps_results_errors_and_timeouts(fake_e2b: type[FakeRemote]) -> None:
    async with sandbox.open("e2b") as sb:
        commands = sb._remote.commands  # type: ignore[attr-defined]
        r = await sb.exec(["echo", "a b"], timeout=5, env={"X": "y"}, cwd="sub")
        call = commands.calls[-1]
        assert call["cmd"] == "echo 'a b'" and call["timeout"] == 5 and call["cwd"] == "/work/sub"
        assert call["envs"] == {"X": "y"} and call["request_timeout"] > 5
        assert r.ok and r.stdout == "out\n"

        commands.next = e2b.CommandExitException(stderr="boom", stdout="", exit_code=3, error=None)
        r = await sb.exec("false")
        assert r.exit_code == 3 and r.stderr == "boom" and not r.timed_out

        commands.next = e2b.TimeoutException("deadline")
        r = await sb.exec("sleep 100", timeout=1)
        assert r.timed_out and r.exit_code == -1

        commands.next = e2b.SandboxNotFoundException("gone")
        with pytest.raises(SandboxError, match="gone"):
            await sb.exec("true")

        await sb.exec("cat", stdin="data")
        assert "< /tmp/.envhub-stdin-" in commands.calls[-1]["cmd"]


async def test_files_map_to_the_filesystem_api(fake_e2b: type[FakeRemote]) -> None:
    async with sandbox.open("e2b") as sb:
        await sb.write_file("notes.txt", "hi")
        assert await sb.read_file("/work/notes.txt") == b"hi"
        with pytest.raises(FileNotFoundError):
            await sb.read_file("missing")


async def test_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(SandboxUnavailable, match="E2B_API_KEY"):
        await sandbox.open("e2b")
