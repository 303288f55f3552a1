"""The double of envd, the agent inside every E2B sandbox, and of the proxy in front of it.

The SDK reaches every sandbox at one sandbox URL and names it in the `E2b-Sandbox-Id` header, with the
access token from the create answer in `X-Access-Token`; the proxy answers 502 "... was not found" for
a sandbox that is gone. Behind it: the Connect-RPC `process.Process` service (served by connectrpc's
own ASGI server from the SDK's generated stubs, so the wire format is connectrpc's, JSON as the SDK
asks) running real processes under bubblewrap, and envd's HTTP `/files` and `/health` routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal, cast

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process.process_connect import Process as ProcessProtocol
from e2b.envd.process.process_connect import ProcessASGIApplication
from e2b.envd.process.process_pb import (
    ListRequest,
    ListResponse,
    ProcessConfig,
    ProcessEvent,
    ProcessInfo,
    SendSignalRequest,
    SendSignalResponse,
    Signal,
    StartRequest,
    StartResponse,
)
from protobuf import Oneof
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.sandbox.e2b_double.control import error
from tests.sandbox.e2b_double.state import HOME, WRITABLE, Process, RemoteSandbox

if TYPE_CHECKING:
    from connectrpc.request import RequestContext
    from starlette.types import ASGIApp, Receive, Scope, Send

    from tests.sandbox.e2b_double import E2BDouble

CHUNK = 32 * 1024


def envd_app(double: E2BDouble) -> ASGIApp:
    """The proxy's checks, then the process service or the HTTP routes."""
    rpc = ProcessASGIApplication(ProcessService(double), compressions=())
    http = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/files", read_file, methods=["GET"]),
            Route("/files", write_file, methods=["POST"]),
        ]
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        double.record("envd", scope["method"], scope["path"], headers, None)
        answer = await double.fault_for("envd", scope["method"], scope["path"])
        if answer is None:
            answer = proxy_refusal(double, headers)
        if answer is not None:
            await answer(scope, receive, send)
            return
        scope["state"] = {"sandbox": double.sandboxes[headers["e2b-sandbox-id"]]}
        target = rpc if scope["path"].startswith("/process.Process/") else http
        await target(scope, receive, send)

    return app


def proxy_refusal(double: E2BDouble, headers: dict[str, str]) -> Response | None:
    """What the proxy and envd answer before the request reaches a handler: the sandbox gone (502, in
    the words the SDK reads as "not running") or a wrong access token (401)."""
    sandbox_id = headers.get("e2b-sandbox-id", "")
    sbx = double.sandboxes.get(sandbox_id)
    if sbx is None or not sbx.running:
        return error(502, f"The sandbox {sandbox_id} was not found")
    if headers.get("x-access-token") != sbx.envd_token:
        return error(401, "unauthorized access, please provide a valid access token")
    return None


def _sandbox_of(request: Request) -> RemoteSandbox:
    sbx: RemoteSandbox = request.scope["state"]["sandbox"]
    return sbx


async def health(request: Request) -> Response:
    return Response(status_code=204)


async def read_file(request: Request) -> Response:
    path = request.query_params.get("path", "")
    target = _sandbox_of(request).host_path(path, for_write=False)
    if target is None or not target.exists():
        return error(404, f"path '{path}' does not exist")
    if target.is_dir():
        return error(400, f"path '{path}' is a directory")
    return Response(target.read_bytes(), media_type="application/octet-stream")


async def write_file(request: Request) -> Response:
    """`POST /files`: one octet-stream body for `?path=`, or multipart `file` parts named by path."""
    sbx = _sandbox_of(request)
    uploads: list[tuple[str, bytes]] = []
    if request.headers.get("content-type", "").startswith("application/octet-stream"):
        uploads.append((request.query_params.get("path", ""), await request.body()))
    else:
        form = await request.form()
        for part in form.getlist("file"):
            if isinstance(part, str):
                return error(400, "a file part carried no file")
            name = request.query_params.get("path") or part.filename or ""
            uploads.append((name, await part.read()))
    written: list[dict[str, Any]] = []
    for path, data in uploads:
        target = sbx.host_path(path, for_write=True)
        if target is None:
            return error(403, f"permission denied: cannot write '{path}'")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append({"name": target.name, "type": "file", "path": path})
    return JSONResponse(written)


class ProcessService(ProcessProtocol):
    """envd's `process.Process`: `Start` streams a real process's output; `SendSignal` signals it.

    As in envd, a process outlives its stream: a client that stops listening (its `timeout` ran out,
    or it disconnected) leaves the process running until someone signals it or the sandbox dies.
    """

    def __init__(self, double: E2BDouble) -> None:
        self.double = double

    def _sandbox(self, ctx: RequestContext[Any, Any]) -> RemoteSandbox:
        return self.double.sandboxes[ctx.request_headers["e2b-sandbox-id"]]

    async def start(
        self, request: StartRequest, ctx: RequestContext[Any, Any]
    ) -> AsyncIterator[StartResponse]:
        sbx = self._sandbox(ctx)
        config = request.process or ProcessConfig()
        proc = await spawn(sbx, config)
        yield StartResponse(
            event=ProcessEvent(
                event=Oneof[Literal["start"], ProcessEvent.StartEvent](
                    "start", ProcessEvent.StartEvent(pid=proc.pid)
                )
            )
        )
        left_ms = ctx.timeout_ms
        deadline = None if left_ms is None else time.monotonic() + left_ms / 1000
        while True:
            try:
                # envd (connect-go) ends the stream at the client's Connect-Timeout-Ms; the process lives on
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                kind, payload = await asyncio.wait_for(proc.events.get(), wait)
            except TimeoutError:
                raise ConnectError(Code.DEADLINE_EXCEEDED, "context deadline exceeded") from None
            if kind == "gone":  # the sandbox was killed under the command
                raise ConnectError(
                    Code.UNAVAILABLE,
                    f"the connection to sandbox {sbx.sandbox_id} ended before the stream completed",
                )
            if kind == "end":
                assert isinstance(payload, int)
                yield StartResponse(
                    event=ProcessEvent(
                        event=Oneof[Literal["end"], ProcessEvent.EndEvent]("end", end_event(payload))
                    )
                )
                return
            assert isinstance(payload, bytes)
            data = ProcessEvent.DataEvent(
                output=cast("Any", Oneof(kind, payload))
            )  # kind is stdout or stderr
            yield StartResponse(
                event=ProcessEvent(event=Oneof[Literal["data"], ProcessEvent.DataEvent]("data", data))
            )

    async def send_signal(
        self, request: SendSignalRequest, ctx: RequestContext[Any, Any]
    ) -> SendSignalResponse:
        sbx = self._sandbox(ctx)
        selector = request.process.selector if request.process else None
        pid = selector.value if isinstance(selector, Oneof) and selector.field == "pid" else None
        proc = sbx.processes.get(pid) if isinstance(pid, int) else None
        if proc is None or not proc.alive:
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        if request.signal in (Signal.SIGKILL, Signal.SIGTERM):
            proc.kill()
        return SendSignalResponse()

    async def list(self, request: ListRequest, ctx: RequestContext[Any, Any]) -> ListResponse:
        sbx = self._sandbox(ctx)
        return ListResponse(
            processes=[
                ProcessInfo(config=ProcessConfig(cmd=p.cmd, args=p.args), pid=p.pid)
                for p in sbx.live_processes()
            ]
        )


def end_event(returncode: int) -> ProcessEvent.EndEvent:
    """envd reports Go's view of the exit: a signal is exit code -1 and "signal: killed"."""
    if returncode < 0:
        return ProcessEvent.EndEvent(exit_code=-1, exited=False, status="signal: killed")
    return ProcessEvent.EndEvent(exit_code=returncode, exited=True, status=f"exit status {returncode}")


async def spawn(sbx: RemoteSandbox, config: ProcessConfig) -> Process:
    """Start the command under bubblewrap: the host's filesystem read-only, the sandbox's folder over
    /work, /tmp and the user's home, its own pid namespace, the sandbox's and the command's variables."""
    cwd = config.cwd if config.has_field("cwd") else HOME
    host_cwd = sbx.host_path(cwd, for_write=False)
    if host_cwd is None or not host_cwd.is_dir():
        raise ConnectError(Code.INVALID_ARGUMENT, f"cwd '{cwd}' does not exist")
    binds: list[str] = []
    for prefix, folder in WRITABLE.items():
        binds += ["--bind", str(sbx.root / folder), prefix]
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--ro-bind", "/", "/",
        "--tmpfs", "/home",  # the host's homes stay out; the user's home is the sandbox's own
        *binds,
        "--dev", "/dev",
        "--proc", "/proc",
        "--unshare-pid",
        "--die-with-parent",
        "--chdir", cwd,
        config.cmd,
        *config.args,
    ]  # fmt: skip
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": HOME,
        "USER": "user",
        **sbx.env_vars,
        **config.envs,
    }
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    process = Process(pid=proc.pid, proc=proc, events=asyncio.Queue(), cmd=config.cmd, args=list(config.args))
    sbx.processes[proc.pid] = process
    task = asyncio.create_task(_pump(sbx, process))
    sbx.tasks.add(task)
    task.add_done_callback(sbx.tasks.discard)
    return process


async def _pump(sbx: RemoteSandbox, process: Process) -> None:
    """Move the process's output into its event queue, then its end (or the sandbox's death)."""

    async def drain(stream: asyncio.StreamReader | None, kind: str) -> None:
        while stream is not None and (chunk := await stream.read(CHUNK)):
            await process.events.put((kind, chunk))

    proc = process.proc
    await asyncio.gather(drain(proc.stdout, "stdout"), drain(proc.stderr, "stderr"))
    code = await proc.wait()
    await process.events.put(("gone", 0) if sbx.killed else ("end", code))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 9)  # anything the command left in the background dies with its group
