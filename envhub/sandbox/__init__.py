"""Sandboxes: where untrusted, model-written code runs. One contract, several backends.

    async with envhub.sandbox.open("local", policy=IsolationPolicy(memory_mb=256)) as sb:
        result = await sb.exec("python3 -c 'print(1 + 1)'", timeout=5)
        report = sb.report()          # what was enforced, and how; stored with the episode

Backends: `local` (bubblewrap, the embedded default), `docker` (the `docker` extra and an engine),
`e2b` (the `e2b` extra and E2B_API_KEY), and `fleet`: any of them in a declared order under quotas and
rate limits, with leases and a reaper (`envhub.sandbox.fleet`, configured by ENVHUB_FLEET).
`docs/sandboxes.md` has the threat model and what each enforces.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from types import TracebackType
from typing import Any

from envhub.record import tape
from envhub.sandbox.backends import BACKENDS, Backend, create
from envhub.sandbox.base import Command, Sandbox
from envhub.sandbox.policy import Enforcement, IsolationPolicy, IsolationReport
from envhub.sandbox.pool import SandboxPool
from envhub.sandbox.python_repl import PythonWorker
from envhub.sandbox.results import ExecResult, SandboxError, SandboxUnavailable
from envhub.sandbox.spares import close_spares, take_spare

__all__ = [
    "BACKENDS",
    "Backend",
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
    "close_spares",
    "open",
]


class _Opening:
    """What `open` returns: await it for a sandbox, or use it as `async with` to close it on exit."""

    def __init__(self, backend: Backend, policy: IsolationPolicy, image: str | None, options: dict[str, Any]):
        self._args = (backend, policy, image, options)
        self._sandbox: Sandbox | None = None

    def __await__(self) -> Generator[Any, None, Sandbox]:
        return _open(*self._args).__await__()

    async def __aenter__(self) -> Sandbox:
        self._sandbox = await _open(*self._args)
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


async def _open(
    backend: Backend, policy: IsolationPolicy, image: str | None, options: dict[str, Any]
) -> Sandbox:
    """A started spare when the local backend is asked for with the default policy (`spare=False` opts
    out; a pool's own `start_server` never takes one, nor does a replay, whose sandboxes are stand-ins),
    else a new sandbox from the backend."""
    if backend == "fleet":
        from envhub.sandbox.fleet import shared_fleet

        # The order, quotas and rate limits come from ENVHUB_FLEET; report().backend names the provider.
        return await shared_fleet().open(policy, image, options)
    options = dict(options)
    spare = options.pop("spare", True)
    local = backend == "local" or (backend == "auto" and not os.environ.get("E2B_API_KEY"))
    if local and spare and image is None and not options.get("start_server") and not tape.replaying():
        taken = await take_spare(policy)
        if taken is not None:
            return taken
    return await create(backend, policy, image, options)
