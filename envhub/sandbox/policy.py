"""What a sandbox must enforce (`IsolationPolicy`) and what it says it did (`IsolationReport`).

The policy is declared by the environment; every backend enforces what it can and reports, control by
control, how — or that it could not. The report is stored with each episode, so a result can always be
traced to the isolation it actually ran under, not the one that was asked for.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MiB = 1024 * 1024

Control = Literal[
    "network",
    "filesystem",
    "disk",
    "memory",
    "pids",
    "cpu",
    "wall_time",
    "user",
    "environment",
    "seccomp",
    "nested_namespaces",
]
"""The parts of a policy a backend reports on, one entry each."""


class IsolationPolicy(BaseModel):
    """The isolation an environment asks for. Defaults are safe for untrusted code: no network, small limits.

    Limits apply to the whole sandbox (every process in it together), not to each process.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    network: bool = False
    """Reach the outside network. Off: the sandbox sees only its own loopback."""
    memory_mb: int = Field(512, ge=16)
    """Resident memory of all processes together, plus files written to the scratch area."""
    pids: int = Field(64, ge=4)
    """Processes and threads alive at once."""
    cpus: float = Field(1.0, gt=0)
    """CPU cores' worth of time per wall-clock second."""
    wall_time_s: float = Field(60.0, gt=0)
    """The longest one `exec` may run; also the default timeout."""
    disk_mb: int = Field(256, ge=1)
    """Total size of everything written to the writable area (workdir, /tmp, /dev/shm)."""
    max_files: int = Field(20_000, ge=16)
    """Files and directories in the writable area."""
    max_output_bytes: int = Field(1 * MiB, ge=1024)
    """Captured stdout and stderr, each; the rest is read and dropped, and the result says it was cut."""
    ro_binds: dict[str, str] = Field(default_factory=dict)
    """Host path -> sandbox path, mounted read-only. Nothing of the host is visible unless bound here."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of every command; the host's own environment never leaks in."""
    workdir: str = "/work"
    """The writable directory commands start in."""
    seccomp: bool = True
    """Refuse dangerous system calls (ptrace, mount, unshare, keyctl, bpf, ...) where the backend can."""
    writable_image: bool = False
    """docker only: work in the image's own filesystem, for images whose files are the task (SWE-bench's
    `/testbed`). The root is writable in the container's own layer (no tmpfs over the workdir; /tmp and
    /dev/shm stay capped tmpfs) and commands run as the image's user, root for SWE-bench's images, still
    with no capabilities, no-new-privileges, seccomp, no network and the same limits. What it costs:
    the layer's size is not capped, and root owns the image's files; the report says both."""

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or value == "/":
            raise ValueError(f"workdir must be an absolute path below /, got {value!r}")
        return value.rstrip("/")

    @field_validator("ro_binds")
    @classmethod
    def _absolute_binds(cls, value: dict[str, str]) -> dict[str, str]:
        for host, inside in value.items():
            if not host.startswith("/") or not inside.startswith("/"):
                raise ValueError(f"read-only binds need absolute paths, got {host!r} -> {inside!r}")
        return value

    def check_backend(self, backend: str) -> None:
        """Refuse a policy the backend cannot honour, before anything starts (ValueError says why)."""
        if self.writable_image and backend != "docker":
            raise ValueError(
                f"writable_image keeps a container image's own filesystem writable, which only the docker "
                f"backend has; the {backend} backend has no image filesystem to keep. Open the sandbox with "
                "backend='docker' and the image, or drop writable_image"
            )

    def digest(self) -> str:
        """A short stable hash, recorded in episode provenance."""
        # writable_image joins the hash only when set, so policies without it keep their old digests.
        text = self.model_dump_json(exclude=None if self.writable_image else {"writable_image"})
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class Enforcement(BaseModel):
    """How one control of the policy was enforced, in words a reviewer can check."""

    model_config = ConfigDict(frozen=True)

    enforced: bool
    how: str


class IsolationReport(BaseModel):
    """What a sandbox enforced, control by control. Stored with every episode."""

    model_config = ConfigDict(frozen=True)

    backend: str
    policy: IsolationPolicy
    controls: dict[Control, Enforcement]
    image: str | None = None
    details: dict[str, str] = Field(default_factory=dict)
    """Backend facts worth keeping: tool versions, uid, cgroup slot."""

    @property
    def fully_enforced(self) -> bool:
        return all(c.enforced for c in self.controls.values())

    def unenforced(self) -> list[str]:
        """The controls that were asked for but not enforced: what a reader of the episode should distrust."""
        return [name for name, c in self.controls.items() if not c.enforced]
