"""The double of E2B's control plane (`https://api.<domain>`): the sandbox routes the SDK calls.

Request and response bodies are read and written with the SDK's own generated models (from E2B's
OpenAPI spec), so the shapes, field names and status codes are those the real client expects; errors
carry E2B's error body `{"code": int, "message": str}`.
"""

from __future__ import annotations

import secrets
import tempfile
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e2b.api.client.models import (
    ConnectSandboxV2,
    ListedSandbox,
    NewSandboxV2,
    Sandbox,
    SandboxState,
    SandboxTimeoutRequest,
)
from e2b.api.client.types import Unset
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.sandbox.e2b_double.state import ENVD_VERSION, WRITABLE, RemoteSandbox

if TYPE_CHECKING:
    from tests.sandbox.e2b_double import E2BDouble


def error(status: int, message: str) -> JSONResponse:
    """E2B's error body, as the generated `Error` model reads it."""
    return JSONResponse({"code": status, "message": message}, status_code=status)


def control_app(double: E2BDouble) -> Starlette:
    """The control-plane routes of the double; every request is recorded, faults answered first."""

    async def guarded(request: Request) -> Response:
        body: Any = None
        raw = await request.body()
        if raw:
            try:
                body = await request.json()
            except ValueError:
                body = raw
        double.record("control", request.method, request.url.path, dict(request.headers), body)
        fault = await double.fault_for("control", request.method, request.url.path)
        if fault is not None:
            return fault
        if request.headers.get("x-api-key") != double.api_key:
            return error(401, "Invalid API key, please visit https://e2b.dev/docs to get your API key.")
        handler = ROUTES[(request.method, request.scope["route"].path)]
        return await handler(double, request, body)

    return Starlette(
        routes=[Route(path, guarded, methods=[method]) for method, path in ROUTES],
    )


def _sandbox_or_404(double: E2BDouble, sandbox_id: str) -> RemoteSandbox | JSONResponse:
    sbx = double.sandboxes.get(sandbox_id)
    if sbx is None or not sbx.running:
        return error(404, f"sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it")
    return sbx


def _as_api(sbx: RemoteSandbox) -> dict[str, Any]:
    return Sandbox(
        template_id=sbx.template_id,
        sandbox_id=sbx.sandbox_id,
        client_id="double",
        envd_version=ENVD_VERSION,
        envd_access_token=sbx.envd_token,
        domain=None,
    ).to_dict()


async def create(double: E2BDouble, request: Request, body: Any) -> Response:
    try:
        new = NewSandboxV2.from_dict(body)
    except (KeyError, TypeError, ValueError) as exc:
        return error(400, f"invalid request body: {exc}")
    if double.templates is not None and new.template_id not in double.templates:
        return error(404, f"template '{new.template_id}' not found")
    sandbox_id = "i" + secrets.token_hex(10)
    root = Path(tempfile.mkdtemp(prefix=f"e2b-double-{sandbox_id}-"))
    for folder in WRITABLE.values():
        (root / folder).mkdir()
    sbx = RemoteSandbox(
        sandbox_id=sandbox_id,
        template_id=new.template_id,
        metadata=dict(new.metadata) if isinstance(new.metadata, dict) else {},
        env_vars=dict(new.env_vars) if isinstance(new.env_vars, dict) else {},
        allow_internet_access=None
        if isinstance(new.allow_internet_access, Unset)
        else new.allow_internet_access,
        timeout_s=300 if isinstance(new.timeout, Unset) else new.timeout,
        root=root,
    )
    double.sandboxes[sandbox_id] = sbx
    return JSONResponse(_as_api(sbx), status_code=201)


async def kill(double: E2BDouble, request: Request, body: Any) -> Response:
    found = _sandbox_or_404(double, request.path_params["sandbox_id"])
    if isinstance(found, JSONResponse):
        return found
    found.destroy()
    return Response(status_code=204)


async def set_timeout(double: E2BDouble, request: Request, body: Any) -> Response:
    found = _sandbox_or_404(double, request.path_params["sandbox_id"])
    if isinstance(found, JSONResponse):
        return found
    timeout = SandboxTimeoutRequest.from_dict(body).timeout
    elapsed = datetime.now(UTC) - found.started_at
    found.timeout_s = int(elapsed.total_seconds()) + timeout  # E2B counts the new timeout from now
    return Response(status_code=204)


async def connect(double: E2BDouble, request: Request, body: Any) -> Response:
    found = _sandbox_or_404(double, request.path_params["sandbox_id"])
    if isinstance(found, JSONResponse):
        return found
    ConnectSandboxV2.from_dict(body or {})
    return JSONResponse(_as_api(found), status_code=200)


async def list_sandboxes(double: E2BDouble, request: Request, body: Any) -> Response:
    """`GET /v2/sandboxes?metadata=k%3Dv&...`: the metadata filter is itself a url-encoded query."""
    wanted = {
        urllib.parse.unquote(k): urllib.parse.unquote(v)
        for k, v in urllib.parse.parse_qsl(request.query_params.get("metadata", ""))
    }
    listed = [
        ListedSandbox(
            template_id=s.template_id,
            sandbox_id=s.sandbox_id,
            client_id="double",
            started_at=s.started_at,
            end_at=s.end_at,
            cpu_count=2,
            memory_mb=512,
            disk_size_mb=1024,
            state=SandboxState.RUNNING,
            envd_version=ENVD_VERSION,
            metadata=s.metadata,
        ).to_dict()
        for s in double.sandboxes.values()
        if s.running and all(s.metadata.get(k) == v for k, v in wanted.items())
    ]
    return JSONResponse(listed, status_code=200)


ROUTES = {
    ("POST", "/v2/sandboxes"): create,
    ("GET", "/v2/sandboxes"): list_sandboxes,
    ("DELETE", "/sandboxes/{sandbox_id}"): kill,
    ("POST", "/sandboxes/{sandbox_id}/timeout"): set_timeout,
    ("POST", "/v2/sandboxes/{sandbox_id}/connect"): connect,
}
