"""The `envhub serve` app: Starlette on uvicorn, one websocket session per episode.

Each session makes its own env, so episodes never share state; `--max-sessions` bounds how many live
at once (one more is refused with a `busy` error the client raises as an InfrastructureError), and a
session silent for longer than the lease is reaped so a vanished client cannot hold a slot forever.
Every refusal is decided on the websocket upgrade, before a frame is read; the connections that have
not earned a session yet are capped and timed by `envhub.serve.doors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from envhub.core import Env, EpisodeStateError
from envhub.integrations.openenv.routes import openenv_routes
from envhub.lock.stamp import stamp
from envhub.registration import registry
from envhub.serve import protocol as p
from envhub.serve.doors import Doors

COUNTERS = (
    "sessions_opened",
    "sessions_reaped",
    "episodes",
    "steps",
    "env_errors",
    "refused_auth",
    "refused_unknown_env",
    "refused_busy",
    "open_timeouts",
    "refused_connections",
    "header_timeouts",
)
"""Every counter `/metrics` reports, zeros included (docs/integrations.md lists them)."""

TOKEN_ADVICE = (
    f"send it as 'Authorization: Bearer TOKEN' or in the URL as ?{p.TOKEN_QUERY}=TOKEN "
    "(envhub's client sends $ENVHUB_SERVE_TOKEN)"
)


@dataclass
class ServeState:
    """What the sessions share: the ids served, the limits, and the counters `/metrics` reports."""

    env_ids: dict[str, str]
    """Every accepted spelling of a served id (as given, as resolved) → the resolved id."""
    max_sessions: int = 256
    token: str | None = None
    lease_seconds: float = 300.0
    open_seconds: float = 10.0
    """How long a websocket may go unauthorised: without a token, from the upgrade to its `open`."""
    doors: Doors = field(default_factory=Doors)
    active: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    step_seconds: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def resolve(self, env_id: str) -> str | None:
        """The served id a client's spelling means (`guess-number` → `guess-number-v0`), or None."""
        if env_id not in self.env_ids:
            if "://" in env_id:  # a URL would make this server a client of another: never served
                return None
            try:
                resolved = registry.spec(env_id).id
            except Exception:  # any id the registry cannot read is simply not served here
                return None
            if resolved not in self.served():
                return None
            self.env_ids[env_id] = resolved
        return self.env_ids[env_id]

    def served(self) -> list[str]:
        return sorted(set(self.env_ids.values()))

    def refusal(self, token: str | None, env_id: str, *, advice: str = TOKEN_ADVICE) -> p.Error | None:
        """Why a new session may not open, or None when it may (checked in this order); `advice` says
        how this client can send a token."""
        if self.token is not None and not hmac.compare_digest((token or "").encode(), self.token.encode()):
            why = "none was sent" if not token else "the one sent is wrong"
            return p.Error(kind="auth", message=f"the server needs a token ({why}): {advice}")
        if self.resolve(env_id) is None:
            return p.Error(
                kind="unknown_env",
                message=f"this server does not serve {env_id!r}; it serves {self.served()}",
            )
        if self.active >= self.max_sessions:
            return p.Error(
                kind="busy",
                message=f"the server is full ({self.max_sessions} sessions); retry later or start "
                "another server with more --max-sessions",
            )
        return None

    def metrics(self) -> dict[str, float | None]:
        steps = self.counts["steps"]
        counts = self.counts + self.doors.counts
        return {
            "sessions_active": self.active,
            "max_sessions": self.max_sessions,
            "uptime_seconds": time.monotonic() - self.started,
            "mean_step_seconds": self.step_seconds / steps if steps else None,
            **{name: counts[name] for name in COUNTERS},
        }


_CLOSE_CODE = {"auth": p.CLOSE_AUTH, "unknown_env": p.CLOSE_UNKNOWN_ENV, "busy": p.CLOSE_BUSY}
_HTTP_STATUS = {"auth": 401, "unknown_env": 404, "busy": 503}


def create_app(
    env_ids: list[str],
    *,
    max_sessions: int = 256,
    token: str | None = None,
    lease_seconds: float = 300.0,
    open_seconds: float = 10.0,
    doors: Doors | None = None,
) -> Starlette:
    """The ASGI app serving `env_ids`; unknown ids fail here, before anything listens. `doors` holds the
    connection limits that `serve` puts on uvicorn (defaults when None)."""
    if max_sessions < 1:
        raise ValueError(f"--max-sessions must be at least 1, got {max_sessions}")
    if lease_seconds <= 0:
        raise ValueError(f"--lease must be positive, got {lease_seconds}")
    if open_seconds <= 0:
        raise ValueError(f"--open-timeout must be positive, got {open_seconds}")
    accepted: dict[str, str] = {}
    for given in env_ids:
        resolved = registry.spec(given).id
        accepted[given] = accepted[resolved] = resolved
    state = ServeState(
        accepted,
        max_sessions=max_sessions,
        token=token,
        lease_seconds=lease_seconds,
        open_seconds=open_seconds,
        doors=doors or Doors(),
    )
    app = Starlette(
        routes=[
            Route("/health", _health),
            Route("/metrics", _metrics),
            *openenv_routes(sorted(set(accepted.values()))),  # OpenEnv's protocol, beside envhub's own
            Route("/{env_id:path}", _describe),
            WebSocketRoute("/{env_id:path}", _session),
        ]
    )
    app.state.serve = state
    return app


async def _health(request: Request) -> JSONResponse:
    state: ServeState = request.app.state.serve
    return JSONResponse(
        {
            "status": "ok",
            "envs": state.served(),
            "sessions": state.active,
            "max_sessions": state.max_sessions,
        }
    )


async def _metrics(request: Request) -> JSONResponse:
    state: ServeState = request.app.state.serve
    return JSONResponse(state.metrics())


def _token(connection: HTTPConnection) -> str | None:
    return p.presented_token(connection.headers, connection.query_params)


async def _describe(request: Request) -> JSONResponse:
    """An env's spec without a session (no env is made): what `envhub.spec(URL)` and `make(URL)` read."""
    state: ServeState = request.app.state.serve
    env_id = request.path_params["env_id"]
    refusal = state.refusal(_token(request), env_id)
    if refusal is not None and refusal.kind != "busy":
        return JSONResponse(refusal.model_dump(mode="json"), status_code=_HTTP_STATUS[refusal.kind])
    description = p.Description(spec=stamp(registry.spec(state.env_ids[env_id])))  # resolved by refusal()
    return JSONResponse(description.model_dump(mode="json"))


async def _session(ws: WebSocket) -> None:
    """Refuse the upgrade (token, unknown id, full) with an HTTP answer before any frame is read, or
    take a slot and serve the episode.

    With a token the session is authorised at the upgrade; without one, its `open` must come within
    `--open-timeout` and fit in the small pre-open frame cap (see envhub.serve.doors).
    """
    state: ServeState = ws.app.state.serve
    refusal = state.refusal(_token(ws), ws.path_params["env_id"])
    if refusal is not None:
        state.counts[f"refused_{refusal.kind}"] += 1
        await deny(ws, refusal, _HTTP_STATUS[refusal.kind])
        return
    state.active += 1  # no await since the check above: the count cannot overshoot
    try:
        session = _Session(state, state.env_ids[ws.path_params["env_id"]], ws.scope.get("client"))
        if state.token is not None:
            session.authorise()
        await ws.accept()
        try:
            await session.serve(ws)
        except WebSocketDisconnect:
            pass  # the client left mid-answer: its episode is over, the env is closed below
        finally:
            await session.close()
    finally:
        state.active -= 1


async def deny(ws: WebSocket, refusal: p.Error, status: int) -> None:
    """Answer a websocket upgrade with an HTTP error carrying `refusal` (no frame is read); a server
    without ASGI's denial-response extension answers 403 instead."""
    try:
        await ws.send_denial_response(JSONResponse(refusal.model_dump(mode="json"), status_code=status))
    except RuntimeError:
        await ws.close(code=_CLOSE_CODE.get(refusal.kind, p.CLOSE_AUTH), reason=refusal.kind)


class _Session:
    """One episode's env and the frames that drive it."""

    def __init__(self, state: ServeState, env_id: str, peer: Any) -> None:
        self.state, self.env_id, self.peer = state, env_id, peer
        self.env: Env | None = None
        self.open_by = time.monotonic() + state.open_seconds
        self.authorised = False

    def authorise(self) -> None:
        """The token was right (at the upgrade), or, with none set, the client sent `open`: from here on
        the session has the lease and a session's frame cap (see envhub.serve.doors)."""
        self.authorised = True
        self.state.doors.authorised(self.peer)

    async def serve(self, ws: WebSocket) -> None:
        """Answer frames until the client closes, leaves, idles past the lease or sends no `open` in time."""
        text = await self.receive(ws)
        while text is not None:
            try:
                frame = p.client_frame.validate_json(text)
            except ValidationError as exc:
                await ws.send_text(p.Error(kind="bad_request", message=str(exc)).model_dump_json())
            else:
                if isinstance(frame, p.Close):
                    return  # Starlette closes the socket once the handler returns
                if isinstance(frame, p.Open) and not self.authorised:
                    self.authorise()
                await self.send(ws, await self.answer(frame))
            text = await self.receive(ws)

    async def receive(self, ws: WebSocket) -> str | None:
        """The next frame's text; None when the client left, idled past the lease (then reaped), or,
        unauthorised, sent no `open` by its deadline."""
        opening = not self.authorised
        wait = max(self.open_by - time.monotonic(), 0.0) if opening else self.state.lease_seconds
        try:
            return await asyncio.wait_for(ws.receive_text(), wait)
        except (WebSocketDisconnect, KeyError):  # KeyError: a binary frame, which no client of ours sends
            return None
        except TimeoutError:
            if opening:
                self.state.counts["open_timeouts"] += 1
                await ws.close(code=p.CLOSE_LEASE, reason="no open in time")
                return None
            self.state.counts["sessions_reaped"] += 1
            message = f"the session was idle past its lease ({self.state.lease_seconds:g} s) and closed"
            await ws.send_text(p.Error(kind="lease", message=message).model_dump_json())
            await ws.close(code=p.CLOSE_LEASE, reason="lease")
            return None

    async def send(self, ws: WebSocket, reply: _Reply) -> None:
        try:
            text = reply.model_dump_json()
        except PydanticSerializationError as exc:  # an info value JSON cannot carry
            text = p.Error(
                kind="infrastructure", message=f"the env's answer is not JSON: {exc}"
            ).model_dump_json()
        await ws.send_text(text)

    async def answer(self, frame: p.Open | p.Reset | p.Step | p.Reference) -> _Reply:
        """The reply to one frame; the env's own exceptions become errors that keep their kind."""
        if self.env is None and not isinstance(frame, p.Open):
            return p.Error(
                kind="episode_state", message="open the session (send 'open') before anything else"
            )
        try:
            if isinstance(frame, p.Open):
                return await self.open(frame)
            if isinstance(frame, p.Reset):
                return await self.reset(frame)
            if isinstance(frame, p.Step):
                return await self.step(frame)
            return await self.reference(frame)
        except EpisodeStateError as exc:
            return p.Error(kind="episode_state", message=str(exc))
        except Exception as exc:  # the env's own failure: the client raises it as an InfrastructureError
            self.state.counts["env_errors"] += 1
            return p.Error(kind="infrastructure", message=f"{type(exc).__name__}: {exc}")

    async def open(self, frame: p.Open) -> p.Hello | p.Error:
        if self.env is not None:
            return p.Error(kind="bad_request", message="the session is already open")
        try:
            self.env = await asyncio.to_thread(
                registry.make, self.env_id, max_turns=frame.max_turns, **frame.kwargs
            )
        except (TypeError, ValueError) as exc:  # the caller's options: not retryable, said as given
            return p.Error(kind="bad_request", message=f"{type(exc).__name__}: {exc}")
        self.state.counts["sessions_opened"] += 1
        assert self.env.spec is not None  # registry.make sets it
        spec = stamp(self.env.spec)  # a served env's episodes carry the lock hash of what runs here
        return p.Hello(spec=spec, tools=self.env.tools, lease_seconds=self.state.lease_seconds)

    async def reset(self, frame: p.Reset) -> p.ResetDone:
        assert self.env is not None
        observation, info = await self.env.reset(seed=frame.seed, options=frame.options)
        self.state.counts["episodes"] += 1
        return p.ResetDone(observation=observation, info=info)

    async def step(self, frame: p.Step) -> p.StepDone:
        assert self.env is not None
        started = time.perf_counter()
        result = await self.env.step(frame.action())
        self.state.step_seconds += time.perf_counter() - started
        self.state.counts["steps"] += 1
        return p.StepDone(
            observation=result.observation,
            reward=result.reward,
            terminated=result.terminated,
            truncated=result.truncated,
            info=result.info,
        )

    async def reference(self, frame: p.Reference) -> p.ReferenceDone:
        assert self.env is not None
        action = await asyncio.to_thread(self.env.reference_action, frame.messages)
        return p.ReferenceDone(action=None if action is None else p.Step.of(action))

    async def close(self) -> None:
        if self.env is not None:
            with contextlib.suppress(Exception):  # the session is over either way
                await self.env.close()
            self.env = None


_Reply = p.Hello | p.ResetDone | p.StepDone | p.ReferenceDone | p.Error


class _Server(uvicorn.Server):
    """uvicorn's server, telling the bound address once it listens (port 0 asks the OS for one)."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[str, int], None] | None) -> None:
        super().__init__(config)
        self.on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_ready is not None:
            bound_host, bound_port = self.servers[0].sockets[0].getsockname()[:2]
            self.on_ready(bound_host, bound_port)


async def serve(
    app: Starlette, *, host: str, port: int, on_ready: Callable[[str, int], None] | None = None
) -> None:
    """Run `app` until interrupted; `on_ready(host, port)` is told the bound port (port 0 picks one).

    uvicorn runs with the app's doors: their protocol classes, their frame cap once a session is
    authorised, a 16 KiB cap on a request's headers, and no proxy headers (a client's address is its
    socket's, so the per-client limit cannot be dodged with X-Forwarded-For).
    """
    doors: Doors = app.state.serve.doors
    http, ws = doors.protocols()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=http,
        ws=ws,
        ws_max_size=doors.frame_max_bytes,
        h11_max_incomplete_event_size=16 * 2**10,
        proxy_headers=False,
    )
    await _Server(config, on_ready).serve()
