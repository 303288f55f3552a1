"""Which backends there are, and making a sandbox of one: what `open` and the pool both start from."""

from __future__ import annotations

import os
from typing import Any, Literal

from envhub.sandbox.base import Sandbox
from envhub.sandbox.policy import IsolationPolicy

Backend = Literal["auto", "local", "docker", "e2b", "fleet"]
BACKENDS: tuple[str, ...] = ("local", "docker", "e2b")
"""The providers; "fleet" opens on one of them (envhub.sandbox.fleet), "auto" picks one."""


async def create(
    backend: Backend, policy: IsolationPolicy, image: str | None, options: dict[str, Any]
) -> Sandbox:
    """A new sandbox of `backend`; each backend's module is imported only when asked for, since docker
    and e2b need their extras."""
    if backend == "auto":
        backend = "e2b" if os.environ.get("E2B_API_KEY") else "local"
    if backend == "fleet":  # the fleet sits above the backends (it calls this function for each provider)
        raise ValueError(
            "the fleet opens sandboxes through envhub.sandbox.open('fleet'), which applies its quotas and "
            "leases; a SandboxPool of fleet sandboxes is not supported: pool one provider instead"
        )
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
    raise ValueError(
        f"unknown sandbox backend {backend!r}; choose one of {', '.join(('auto', *BACKENDS, 'fleet'))}"
    )
