"""A local HTTP double of E2B, so envhub's e2b backend is tested through the real SDK down to the wire.

Two servers (uvicorn, on one background thread and loop): the control plane (`E2B_API_URL`) and the
sandbox proxy with envd behind it (`E2B_SANDBOX_URL`), both settings the SDK itself reads. Sandboxes are
temp folders; their commands are real processes under bubblewrap. A test can make either server answer
with an error, a rate limit or nothing at all (`fail`), kill a sandbox behind the client's back
(`kill_sandbox`), and read what the SDK sent (`seen`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal

import pytest
import uvicorn
from starlette.responses import JSONResponse, Response

from tests.sandbox.e2b_double.control import control_app
from tests.sandbox.e2b_double.envd import envd_app
from tests.sandbox.e2b_double.state import Fault, Process, RemoteSandbox, Seen

__all__ = ["E2BDouble", "Fault", "Process", "RemoteSandbox", "Seen", "bwrap_missing"]

Plane = Literal["control", "envd"]


def bwrap_missing() -> str | None:
    """Why the double cannot run commands here, or None."""
    return None if shutil.which("bwrap") else "bubblewrap is not installed; run sandboxes/ci-setup.sh"


class E2BDouble:
    """E2B's API and envd on 127.0.0.1; `start()` it, point the SDK at `api_url`/`sandbox_url`."""

    def __init__(self, api_key: str = "e2b_double_key", templates: set[str] | None = None) -> None:
        self.api_key = api_key
        self.templates = templates
        self.sandboxes: dict[str, RemoteSandbox] = {}
        self.requests: list[tuple[Plane, Seen]] = []
        self.faults: dict[Plane, list[Fault]] = {"control": [], "envd": []}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release = threading.Event()
        self._servers: list[uvicorn.Server] = []
        self._sockets = [self._listen(), self._listen()]
        self.api_url = self._url(self._sockets[0])
        self.sandbox_url = self._url(self._sockets[1])
        self._thread = threading.Thread(target=self._run, name="e2b-double", daemon=True)

    @staticmethod
    def _listen() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        return sock

    @staticmethod
    def _url(sock: socket.socket) -> str:
        host, port = sock.getsockname()
        return f"http://{host}:{port}"

    # -- running -----------------------------------------------------------------------------------

    def start(self) -> E2BDouble:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not (self._servers and all(s.started for s in self._servers)):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the E2B double did not start")
            time.sleep(0.01)
        return self

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        apps: list[Any] = [control_app(self), envd_app(self)]
        for app in apps:
            config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
            self._servers.append(uvicorn.Server(config))
        await asyncio.gather(
            *(s.serve(sockets=[sock]) for s, sock in zip(self._servers, self._sockets, strict=True))
        )
        for sbx in self.sandboxes.values():
            sbx.destroy()
        for sbx in self.sandboxes.values():
            for proc in sbx.processes.values():
                await proc.proc.wait()

    def stop(self) -> None:
        """Stop both servers, kill every sandbox's processes and remove their folders."""
        self._release.set()
        for server in self._servers:
            server.should_exit = True
        self._thread.join(timeout=30)
        for sock in self._sockets:
            sock.close()

    def call(self, fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run a coroutine on the double's own loop (its processes live there) and wait for it."""
        assert self._loop is not None, "start() the double first"
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout=30)

    # -- what a test steers and reads ------------------------------------------------------------

    def fail(self, plane: Plane, method: str, path: str, **answer: Any) -> Fault:
        """Answer the next matching request(s) of `plane` with `answer` (see `Fault`) instead."""
        fault = Fault(method=method, path=path, **answer)
        self.faults[plane].append(fault)
        return fault

    def kill_sandbox(self, sandbox_id: str) -> None:
        """What E2B does at a sandbox's timeout or an outage: the VM and everything in it is gone."""

        async def kill() -> None:
            self.sandboxes[sandbox_id].destroy()

        self.call(kill)

    def seen(self, plane: Plane, method: str | None = None, path: str | None = None) -> list[Seen]:
        return [
            r
            for p, r in self.requests
            if p == plane and (method is None or r.method == method) and (path is None or r.path == path)
        ]

    def live(self) -> list[RemoteSandbox]:
        return [s for s in self.sandboxes.values() if s.running]

    def processes(self) -> Iterator[Process]:
        for sbx in self.sandboxes.values():
            yield from sbx.processes.values()

    # -- used by the apps --------------------------------------------------------------------------

    def record(self, plane: Plane, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        self.requests.append((plane, Seen(method, path, headers, body, time.monotonic())))

    async def fault_for(self, plane: Plane, method: str, path: str) -> Response | None:
        for fault in self.faults[plane]:
            if fault.matches(method, path):
                fault.times -= 1
                if fault.hang:
                    await asyncio.to_thread(self._release.wait)
                body = fault.body if fault.body is not None else {"code": fault.status, "message": "injected"}
                return JSONResponse(body, status_code=fault.status, headers=fault.headers)
        return None


@contextlib.contextmanager
def serving(monkeypatch: pytest.MonkeyPatch) -> Iterator[E2BDouble]:
    """A started double, and the SDK (here and in child processes) pointed at it by the settings it
    reads itself; stopped on exit."""
    fake = E2BDouble().start()
    monkeypatch.setenv("E2B_API_KEY", fake.api_key)
    monkeypatch.setenv("E2B_API_URL", fake.api_url)
    monkeypatch.setenv("E2B_SANDBOX_URL", fake.sandbox_url)
    try:
        yield fake
    finally:
        fake.stop()
