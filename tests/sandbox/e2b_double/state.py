"""What the E2B double remembers: its sandboxes (each a temp folder with real processes), the requests it
was sent, and the faults a test asked it to answer with."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

ENVD_VERSION = "0.6.8"
"""The envd version the double announces: recent enough that the SDK sends no default user and may
upload as octet-stream (both version-gated in the SDK)."""

HOME = "/home/user"
WRITABLE = {"/work": "work", "/tmp": "tmp", HOME: "home"}
"""The sandbox paths backed by the sandbox's own folder (bound read-write into its processes); the
rest of the filesystem its processes see is the host's, read-only."""


@dataclass
class Fault:
    """One answer the double gives instead of the real one: `status` with `body` and `headers`, or no
    answer at all (`hang`) until the double stops. Matches requests by method and path regex."""

    method: str
    path: str
    status: int = 500
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    times: int = 1

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and method == self.method and re.fullmatch(self.path, path) is not None


@dataclass
class Seen:
    """A request as the double received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float


@dataclass
class Process:
    """A command started through envd: a real process (under bubblewrap) and its output as events."""

    pid: int
    proc: asyncio.subprocess.Process
    events: asyncio.Queue[tuple[str, bytes | int]]
    cmd: str
    args: list[str]

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    def kill(self) -> None:
        """SIGKILL the whole group: bwrap and everything the command started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)


@dataclass
class RemoteSandbox:
    """One sandbox: its creation request and a folder standing in for its VM's writable disk."""

    sandbox_id: str
    template_id: str
    metadata: dict[str, str]
    env_vars: dict[str, str]
    allow_internet_access: bool | None
    timeout_s: int
    root: Path
    envd_token: str = field(default_factory=lambda: secrets.token_hex(16))
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    killed: bool = False
    processes: dict[int, Process] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def end_at(self) -> datetime:
        return self.started_at + timedelta(seconds=self.timeout_s)

    @property
    def running(self) -> bool:
        return not self.killed and datetime.now(UTC) < self.end_at

    def live_processes(self) -> list[Process]:
        return [p for p in self.processes.values() if p.alive]

    def host_path(self, path: str, *, for_write: bool) -> Path | None:
        """Where a sandbox path lives on this host; None for a write outside the writable areas."""
        p = PurePosixPath(HOME) / path  # a relative path is read from the user's home, as envd does
        parts: list[str] = []
        for part in p.parts[1:]:
            if part == "..":
                if parts:
                    parts.pop()
            elif part != ".":
                parts.append(part)
        clean = PurePosixPath("/", *parts)
        for prefix, folder in WRITABLE.items():
            if clean == PurePosixPath(prefix) or PurePosixPath(prefix) in clean.parents:
                return self.root / folder / clean.relative_to(prefix)
        return None if for_write else Path(clean)

    def destroy(self) -> None:
        self.killed = True
        for proc in self.processes.values():
            proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)
