"""What running something in a sandbox gives back: an `ExecResult`, or an error of the sandbox itself.

Its own module so that the Python worker, which returns results and raises these errors, needs nothing
of the `Sandbox` class that starts it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from envhub.core import InfrastructureError


class SandboxError(InfrastructureError):
    """The sandbox itself failed (could not start, lost its container); not the command inside it."""


class SandboxUnavailable(SandboxError):
    """The backend cannot run on this machine; the message says what to install or set."""


class SandboxTimeout(SandboxError):
    """A host-side wait on the sandbox ran past its bound; what it waited on was killed or abandoned.

    Every wait of the host (a pipe write, a worker's reply, a cleanup) has a bound, so a wedged sandbox
    costs the host at most that long, never forever.
    """


class ExecResult(BaseModel):
    """One command's outcome and what it cost. Output is decoded as UTF-8, bad bytes replaced."""

    model_config = ConfigDict(frozen=True)

    stdout: str
    stderr: str
    exit_code: int
    """The command's exit status; 128+N when a signal N ended it, -1 when the sandbox killed it."""
    timed_out: bool = False
    oom_killed: bool = False
    output_truncated: bool = False
    wall_time_s: float
    cpu_time_s: float | None = None
    """CPU time of every process the command started; None where the backend cannot measure it."""
    peak_memory_bytes: int | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed
