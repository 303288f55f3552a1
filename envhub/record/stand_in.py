"""The sandbox a replayed env gets: nothing runs in it, the tape answers every call.

Its calls never reach these methods: its class is wrapped like any backend's (`envhub.sandbox.intercept`),
and while a tape replays, the tape's interceptor answers them. Reaching one means the sandbox is used
outside its replay, which is a mistake worth a clear error.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from envhub.sandbox.base import Background, Command, Sandbox
from envhub.sandbox.policy import IsolationPolicy, IsolationReport
from envhub.sandbox.results import ExecResult, SandboxError


class ReplaySandbox(Sandbox):
    """Stands in for a sandbox of `backend` during a replay."""

    backend: ClassVar[str] = "replay"

    def __init__(self, policy: IsolationPolicy, backend: str = "replay") -> None:
        super().__init__(policy)
        self.replayed_backend = backend

    async def exec(
        self,
        command: Command,
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the contract's signature
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        raise _outside()

    async def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        raise _outside()

    async def read_file(self, path: str) -> bytes:
        raise _outside()

    async def upload_dir(self, local_dir: str | Path, dest: str) -> None:
        raise _outside()

    async def download(self, path: str, local_dest: str | Path) -> None:
        raise _outside()

    def report(self) -> IsolationReport:
        raise _outside()

    async def reset(self) -> None:
        """Nothing to wipe: the recording already holds what the next calls answer."""

    async def start_background(self, command: Command, *, env: Mapping[str, str] | None = None) -> Background:
        raise _outside()

    async def _close(self) -> None:
        return

    def __repr__(self) -> str:
        return f"<ReplaySandbox of {self.replayed_backend}>"


def _outside() -> SandboxError:
    return SandboxError(
        "a replay sandbox answers only while its episode is replayed (envhub.record.replay.replay_episode); "
        "open a real sandbox to run commands"
    )
