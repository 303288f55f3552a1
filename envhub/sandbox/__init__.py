"""Sandboxes: where untrusted, model-written code runs. One contract, several backends.

    async with envhub.sandbox.open("local", policy=IsolationPolicy(memory_mb=256)) as sb:
        result = await sb.exec("python3 -c 'print(1 + 1)'", timeout=5)
        report = sb.report()          # what was enforced, and how; stored with the episode

Backends: `local` (bubblewrap, the embedded default), `docker` (the `docker` extra and an engine),
`e2b` (the `e2b` extra and E2B_API_KEY). `docs/sandboxes.md` has the threat model and what each enforces.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from types import TracebackType
from typing import Any, Literal

from envhub.sandbox.base import Command, ExecResult, Sandbox, SandboxError, SandboxUnavailable
from envhub.sandbox.policy import Enforcement, IsolationPolicy, IsolationReport
from envhub.sandbox.pool import SandboxPool
from envhub.sandbox.worker import PythonWorker

__all__ = [
    "BACKENDS",
    "Command",
    "Enforcement",
    "ExecResult",
    "IsolationPolicy",
    "IsolationReport",
    "PythonWorker",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "SandboxUnavailable",
    "open",
]

Backend = Literal["auto", "local", "docker", "e2b"]
BACKENDS: tuple[str, ...] = ("local", "docker", "e2b")


async def _create(
    backend: Backend, policy: IsolationPolicy, image: str | None, options: dict[str, Any]
) -> Sandbox:
    if backend == "auto":
        backend = "e2b" if os.environ.get("E2B_API_KEY") else "local"
    if backend in BACKENDS:
        policy.check_backend(backend)  # options only some backends can honour are refused, never ignored
    if backend == "local":
        from envhub.sandbox.local import LocalSandbox

        if image is not None:
            raise ValueError("the local backend runs the host's /usr and takes no image; use docker or e2b")
        return await LocalSandbox.create(policy, **options)
    if backend == "docker":
        from envhub.sandbox.docker import DockerSandbox

        return await DockerSandbox.create(policy, image=image, **options)
    if backend == "e2b":
        from envhub.sandbox.e2b import E2BSandbox

        return await E2BSandbox.create(policy, template=image, **options)
    raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(('auto', *BACKENDS))}")


class _Opening:
    """What `open` returns: await it for a sandbox, or use it as `async with` to close it on exit."""

    def __init__(self, backend: Backend, policy: IsolationPolicy, image: str | None, options: dict[str, Any]):
        self._args = (backend, policy, image, options)
        self._sandbox: Sandbox | None = None

    def __await__(self) -> Generator[Any, None, Sandbox]:
        return _create(*self._args).__await__()

    async def __aenter__(self) -> Sandbox:
        self._sandbox = await _create(*self._args)
        return self._sandbox

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._sandbox is not None:
            await self._sandbox.close()


def open(
    backend: Backend = "local",
    *,
    policy: IsolationPolicy | None = None,
    image: str | None = None,
    **options: Any,
) -> _Opening:
    """Open a sandbox. `backend="auto"` picks e2b when E2B_API_KEY is set, else local.

    Fails with SandboxUnavailable (saying what to install) rather than ever running code unsandboxed.
    """
    return _Opening(backend, policy or IsolationPolicy(), image, options)
