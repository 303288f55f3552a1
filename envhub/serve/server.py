"""The `envhub serve` app: Starlette on uvicorn, one websocket session per episode.

Each session makes its own env, so episodes never share state; `--max-sessions` bounds how many live
at once (one more is refused with a `busy` error the client raises as an InfrastructureError), and a
session silent for longer than the lease is reaped so a vanished client cannot hold a slot forever.
Every refusal is decided on the websocket upgrade, before a frame is read; the connections that have
not earned a session yet are capped and timed by `envhub.serve.doors`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import uvicorn
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from envhub.core import EpisodeStateError
from envhub.integrations.openenv.routes import openenv_routes
from envhub.lock.stamp import stamp
from envhub.registration import registry
from envhub.serve import protocol as p
from envhub.serve.doors import Doors
from envhub.serve.session import Reply, ServeState, Session, hold


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
        return JSONResponse(refusal.model_dump(mode="json"), status_code=p.REFUSAL_HTTP_STATUS[refusal.kind])
    description = p.Description(spec=stamp(registry.spec(state.env_ids[env_id])))  # resolved by refusal()
    return JSONResponse(description.model_dump(mode="json"))


async def _session(ws: WebSocket) -> None:
    """Refuse the upgrade (token, unknown id, full) with an HTTP answer before any frame is read, or
    take a slot and serve the episode in envhub's frames.

    With a token the session is authorised at the upgrade; without one, its `open` must come within
    `--open-timeout` and fit in the small pre-open frame cap (see envhub.serve.doors).
    """
    state: ServeState = ws.app.state.serve
    refusal = state.refusal(_token(ws), ws.path_params["env_id"])
    if refusal is not None:
        state.counts[f"refused_{refusal.kind}"] += 1
        await deny(ws, refusal, p.REFUSAL_HTTP_STATUS[refusal.kind])
        return
    await hold(ws, state, state.env_ids[ws.path_params["env_id"]], _Envhub())


async def deny(ws: WebSocket, refusal: p.Error, status: int) -> None:
    """Answer a websocket upgrade with an HTTP error carrying `refusal` (no frame is read); a server
    without ASGI's denial-response extension answers 403 instead."""
    try:
        await ws.send_denial_response(JSONResponse(refusal.model_dump(mode="json"), status_code=status))
    except RuntimeError:
        await ws.close(code=p.REFUSAL_CLOSE_CODE.get(refusal.kind, p.CLOSE_AUTH), reason=refusal.kind)


class _Envhub:
    """envhub's protocol at the edge of a session (an `Edge`): its frames in, the session's calls, its
    frames out; the env's own exceptions become errors that keep their kind."""

    silent_reason = "no open in time"

    def lease_frame(self, message: str) -> str:
        return p.Error(kind="lease", message=message).model_dump_json()

    async def answer(self, session: Session, text: str) -> Reply | None:
        try:
            frame = p.client_frame.validate_json(text)
        except ValidationError as exc:
            return Reply(p.Error(kind="bad_request", message=str(exc)).model_dump_json())
        if isinstance(frame, p.Close):
            return None
        if isinstance(frame, p.Open) and not session.authorised:
            session.authorise()
        return Reply(_dump(await self.reply(session, frame)))

    async def reply(self, session: Session, frame: p.Open | p.Reset | p.Step | p.Reference) -> _Reply:
        if session.env is None and not isinstance(frame, p.Open):
            return p.Error(
                kind="episode_state", message="open the session (send 'open') before anything else"
            )
        try:
            if isinstance(frame, p.Open):
                return await self.open(session, frame)
            if isinstance(frame, p.Reset):
                observation, info = await session.reset(seed=frame.seed, options=frame.options)
                return p.ResetDone(observation=observation, info=info)
            if isinstance(frame, p.Step):
                result = await session.step(frame.action())
                return p.StepDone(
                    observation=result.observation,
                    reward=result.reward,
                    terminated=result.terminated,
                    truncated=result.truncated,
                    info=result.info,
                )
            action = await session.reference(frame.messages)
            return p.ReferenceDone(action=None if action is None else p.Step.of(action))
        except EpisodeStateError as exc:
            return p.Error(kind="episode_state", message=str(exc))
        except Exception as exc:  # the env's own failure: the client raises it as an InfrastructureError
            session.env_failed()
            return p.Error(kind="infrastructure", message=f"{type(exc).__name__}: {exc}")

    async def open(self, session: Session, frame: p.Open) -> p.Hello | p.Error:
        if session.env is not None:
            return p.Error(kind="bad_request", message="the session is already open")
        try:
            env = await session.make(max_turns=frame.max_turns, kwargs=frame.kwargs)
        except (TypeError, ValueError) as exc:  # the caller's options: not retryable, said as given
            return p.Error(kind="bad_request", message=f"{type(exc).__name__}: {exc}")
        assert env.spec is not None  # registry.make sets it
        spec = stamp(env.spec)  # a served env's episodes carry the lock hash of what runs here
        return p.Hello(spec=spec, tools=env.tools, lease_seconds=session.state.lease_seconds)


def _dump(reply: _Reply) -> str:
    try:
        return reply.model_dump_json()
    except PydanticSerializationError as exc:  # an info value JSON cannot carry
        return p.Error(
            kind="infrastructure", message=f"the env's answer is not JSON: {exc}"
        ).model_dump_json()


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
