"""The `e2b` backend: E2B's hosted microVM sandboxes through `e2b-code-interpreter`.

Needs the `e2b` extra and E2B_API_KEY. The service is unreachable from envhub's CI, so this module is
tested through the real SDK against a local double of E2B's API and envd (tests/sandbox/e2b_double):
everything up to the network is real; the isolation itself is E2B's, and the report says so.

Every failure of E2B (its API refusing, rate limiting, timing out or unreachable; the sandbox gone) is a
`SandboxError`, an infrastructure error the runner retries; only a command's own outcome (its exit code,
its timeout) and a missing file reach the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shlex
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from envhub.sandbox import owner
from envhub.sandbox.base import Command, Sandbox, sandbox_path, to_argv
from envhub.sandbox.policy import Enforcement, IsolationPolicy, IsolationReport
from envhub.sandbox.results import ExecResult, SandboxError, SandboxTimeout, SandboxUnavailable

REMOTE_GRACE_S = 10.0
CREATE_TIMEOUT_S = REMOTE_GRACE_S + 20
"""How long one request of the control plane may take (the SDK's retries of a 429/503 fit in it)."""

LABEL = "envhub.sandbox"
OWNER_LABEL = owner.MARK_PID
HOST_LABEL = owner.MARK_HOST
"""The metadata every envhub sandbox carries, as Docker's labels do: a reaper lists E2B sandboxes by
`envhub.sandbox=1` and kills those whose owner is dead by the owner rule (envhub.sandbox.owner.judge)."""


def owner_metadata() -> dict[str, str]:
    return {LABEL: "1", **owner.me().marks()}


def _failure(exc: BaseException, doing: str) -> SandboxError:
    """An E2B failure as envhub's infrastructure error: a timeout of a request is a SandboxTimeout."""
    import e2b
    import httpx

    if isinstance(exc, httpx.TimeoutException | TimeoutError) or type(exc) is e2b.TimeoutException:
        return SandboxTimeout(f"E2B did not answer in time while {doing}: {exc}")
    return SandboxError(f"E2B failed while {doing}: {type(exc).__name__}: {exc}")


def _is_gone(exc: BaseException) -> bool:
    import e2b

    gone = (e2b.SandboxNotRunningException, e2b.SandboxNotFoundException, e2b.SandboxUnreachableException)
    return isinstance(exc, gone)


def _gone_or_failure(exc: BaseException, doing: str) -> SandboxError:
    if _is_gone(exc):
        return SandboxError(f"the E2B sandbox is gone ({doing}): {exc}")
    return _failure(exc, doing)


def _remote_errors() -> tuple[type[BaseException], ...]:
    """Everything the SDK raises for a failure of the service or the network (not of the command)."""
    import e2b
    import httpx

    return (e2b.SandboxException, e2b.ServiceBusyException, httpx.HTTPError, OSError)


def _sdk() -> Any:
    try:
        import e2b_code_interpreter
    except ImportError as exc:
        raise SandboxUnavailable("the e2b backend needs the SDK: pip install 'envhub-core[e2b]'") from exc
    return e2b_code_interpreter


class E2BSandbox(Sandbox):
    """A remote E2B sandbox. Open it with `envhub.sandbox.open("e2b", policy=..., image=TEMPLATE)`."""

    backend: ClassVar[str] = "e2b"

    def __init__(self, policy: IsolationPolicy, *, remote: Any, template: str | None) -> None:
        super().__init__(policy)
        self._remote = remote
        self.template = template

    @classmethod
    async def create(
        cls,
        policy: IsolationPolicy,
        *,
        template: str | None = None,
        request_timeout: float = CREATE_TIMEOUT_S,
    ) -> E2BSandbox:
        key = os.environ.get("E2B_API_KEY")
        if not key:
            raise SandboxUnavailable("the e2b backend needs an API key: set E2B_API_KEY")
        sdk = _sdk()
        import e2b

        try:
            remote = await sdk.AsyncSandbox.create(
                template=template,
                # The sandbox's lifetime: the longest command plus slack, so a leaked one expires soon.
                timeout=int(policy.wall_time_s + 300),
                metadata=owner_metadata(),
                envs=dict(policy.env),
                allow_internet_access=policy.network,
                api_key=key,
                request_timeout=request_timeout,
            )
        except e2b.AuthenticationException as exc:
            raise SandboxUnavailable(f"E2B refused the API key: {exc}") from exc
        except _remote_errors() as exc:
            raise _failure(exc, "creating a sandbox") from exc
        sandbox = cls(policy, remote=remote, template=template)
        try:
            _, err, code, _ = await sandbox._run(f"mkdir -p {shlex.quote(policy.workdir)}", timeout=30)
            if code != 0:
                raise SandboxError(
                    f"E2B sandbox: could not create the workdir {policy.workdir}: {err.strip()}"
                )
        except BaseException:
            await sandbox.close_quietly()  # a half-made sandbox must not run on, billed, until it expires
            raise
        return sandbox

    async def close_quietly(self) -> None:
        """Close after a failure: the failure being reported matters more than the close's own."""
        with contextlib.suppress(SandboxError):
            await self.close()

    async def _run(
        self,
        cmd: str,
        *,
        timeout: float,  # noqa: ASYNC109 - the per-call limit is the contract
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> tuple[str, str, int, bool]:
        import e2b

        self._check_open()
        try:
            handle = await self._remote.commands.run(
                cmd,
                background=True,  # a handle, so a command past its limit can be killed
                envs={**self.policy.env, **(env or {})},
                cwd=cwd,
                timeout=timeout,
                request_timeout=timeout + REMOTE_GRACE_S,
            )
        except _remote_errors() as exc:
            raise _gone_or_failure(exc, "starting a command") from exc
        try:
            result = await handle.wait()
        except e2b.CommandExitException as exc:  # a non-zero exit is a result, not an error
            return exc.stdout, exc.stderr, exc.exit_code, False
        except e2b.TimeoutException as exc:
            if _is_gone(exc):  # the SDK makes "the sandbox is gone" a TimeoutException too
                raise _gone_or_failure(exc, "running a command") from exc
            # envd keeps a command running when its stream ends; kill it, as every backend does at the limit.
            await self._kill_command(handle)
            return "", f"timed out after {timeout} s\n", -1, True
        except _remote_errors() as exc:
            raise _gone_or_failure(exc, "running a command") from exc
        return result.stdout, result.stderr, result.exit_code, False

    async def _kill_command(self, handle: Any) -> None:
        try:
            await handle.kill()
        except _remote_errors() as exc:
            raise _failure(exc, "killing a command past its time limit") from exc

    async def exec(
        self,
        command: Command,
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the per-call limit is the contract
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        limit = min(timeout, self.policy.wall_time_s) if timeout is not None else self.policy.wall_time_s
        line = shlex.join(to_argv(command))
        if stdin is not None:
            # The SDK streams stdin only to background commands; a file keeps this one call.
            path = f"/tmp/.envhub-stdin-{time.monotonic_ns()}"
            await self.write_file(path, stdin)
            line = f"{line} < {path}; rc=$?; rm -f {path}; exit $rc"
            line = shlex.join(["sh", "-c", line])
        workdir = str(sandbox_path(cwd, self.policy.workdir)) if cwd else self.policy.workdir
        started = time.monotonic()
        out, err, code, timed_out = await self._run(line, timeout=limit, env=env, cwd=workdir)
        cap = self.policy.max_output_bytes
        return ExecResult(
            stdout=out[:cap],
            stderr=err[:cap],
            exit_code=code,
            timed_out=timed_out,
            output_truncated=len(out) > cap or len(err) > cap,
            wall_time_s=time.monotonic() - started,
        )

    async def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        self._check_open()
        try:
            await self._remote.files.write(str(sandbox_path(path, self.policy.workdir)), data)
        except _remote_errors() as exc:
            raise _failure(exc, f"writing {path}") from exc

    async def read_file(self, path: str) -> bytes:
        import e2b

        self._check_open()
        try:
            data = await self._remote.files.read(str(sandbox_path(path, self.policy.workdir)), format="bytes")
        except e2b.FileNotFoundException as exc:  # the path the caller gave: theirs to hear about
            raise FileNotFoundError(path) from exc
        except e2b.InvalidArgumentException as exc:  # envd's 400: the path is a directory
            raise IsADirectoryError(f"{path}: {exc}") from exc
        except _remote_errors() as exc:
            raise _failure(exc, f"reading {path}") from exc
        return bytes(data)

    async def upload_dir(self, local_dir: str | Path, dest: str) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(local_dir), arcname=".")
        target = str(sandbox_path(dest, self.policy.workdir))
        archive = f"/tmp/.envhub-upload-{time.monotonic_ns()}.tgz"
        await self.write_file(archive, buf.getvalue())
        cmd = (
            f"mkdir -p {shlex.quote(target)} && tar -xzf {archive} -C {shlex.quote(target)}; rm -f {archive}"
        )
        _, err, code, _ = await self._run(cmd, timeout=120)
        if code != 0:
            raise SandboxError(f"unpacking the upload in E2B failed: {err}")

    async def download(self, path: str, local_dest: str | Path) -> None:
        target = sandbox_path(path, self.policy.workdir)
        archive = f"/tmp/.envhub-download-{time.monotonic_ns()}.tar"
        cmd = shlex.join(["tar", "-cf", archive, "-C", str(target.parent), target.name])
        _, err, code, _ = await self._run(cmd, timeout=120)
        if code != 0:
            raise FileNotFoundError(f"{path}: {err.strip()}")
        from envhub.sandbox.docker import _extract

        data = await self.read_file(archive)
        await asyncio.to_thread(_extract, data, target.name, Path(local_dest))

    async def _close(self) -> None:
        try:
            await self._remote.kill()  # False (already gone: expired or killed) is as good as killed
        except _remote_errors() as exc:
            raise _failure(exc, "killing the sandbox (it expires at its timeout)") from exc

    def report(self) -> IsolationReport:
        p = self.policy
        remote = "enforced by E2B's Firecracker microVM, not by envhub"
        controls = {
            "network": Enforcement(
                enforced=True,
                how=f"allow_internet_access={p.network} at creation ({remote})",
            ),
            "filesystem": Enforcement(enforced=True, how="a separate VM: nothing of this host exists there"),
            "disk": Enforcement(
                enforced=False, how="E2B's template disk size; the policy's cap is not applied"
            ),
            "memory": Enforcement(
                enforced=False, how="E2B's template memory; the policy's cap is not applied"
            ),
            "pids": Enforcement(enforced=False, how="not configurable through the E2B API"),
            "cpu": Enforcement(enforced=False, how="E2B's template vCPUs; the policy's cap is not applied"),
            "wall_time": Enforcement(
                enforced=True, how="per-command timeout in the E2B API; sandbox lifetime"
            ),
            "user": Enforcement(enforced=True, how="E2B's default user inside the VM"),
            "environment": Enforcement(enforced=True, how="only the policy's variables are sent"),
            "seccomp": Enforcement(enforced=False, how="not configurable; the VM boundary is the isolation"),
            "nested_namespaces": Enforcement(enforced=False, how="allowed inside the VM"),
        }
        return IsolationReport(
            backend=self.backend,
            policy=p,
            controls=controls,
            image=self.template,
            details={"sandbox_id": str(getattr(self._remote, "sandbox_id", ""))},
        )
