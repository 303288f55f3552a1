"""`envhub serve` speaking OpenEnv's wire protocol, so OpenEnv clients (and TRL's OpenEnv integration)
play any envhub env.

OpenEnv's URLs name no env, so each served id gets its own base, `http://HOST:PORT/openenv/ID`, under
which sit OpenEnv's endpoints (`/ws`, `/reset`, `/step`, `/state`, `/schema`, `/metadata`, `/health`);
when the server serves exactly one id, they are also at the root, where OpenEnv clients look by default;
when it serves several, the root answers an OpenEnv client with the list of ids and their base URLs.
A websocket session is the one session class of `envhub serve` (`envhub.serve.session`), as envhub's
own protocol gets: one env made for it, the same token, `--max-sessions`, lease, counters and doors
(`envhub.serve.doors`); this module only translates OpenEnv's frames into its calls and back.
openenv-core's client sends no headers and appends `/ws` to its base URL (so a `?token=` there would
be cut off), so the token rides in the URL's user info (`http://envhub:TOKEN@HOST:PORT/...`, which a
websocket client sends as Basic auth).

Every refusal (token, unknown id, full) is decided on the upgrade, before a frame is read, and reaches
the client as openenv-core's own error frame: the socket is accepted only to say why (the reply to the
client's first frame, which must come within `--open-timeout` and fit the pre-open frame cap), then
closed.

Actions are `EnvhubAction`: the agent's text (`message`, read as model text, so `<tool_call>` blocks are
tool calls, as `env.step(str)` reads it in-process) and/or structured `tool_calls`. Observations are
`EnvhubObservation`: the env's new messages in OpenAI's chat format, their text, `truncated`, the step's
`info`, and at reset the tools the agent may call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from envhub.core import Action, Env, EpisodeStateError, Observation
from envhub.integrations.openenv import wire
from envhub.registration import registry
from envhub.serve import protocol as p
from envhub.serve.session import Reply, ServeState, Session, hold

PREFIX = "/openenv"


class ToolCallAction(BaseModel):
    """One tool call: its name and arguments (an object, or the JSON text a model wrote)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None


class EnvhubAction(BaseModel):
    """An agent's turn in an envhub env: its text, its tool calls, or both."""

    model_config = ConfigDict(extra="forbid")

    message: str = ""
    """The assistant's reply as model text; `<tool_call>` blocks in it are tool calls."""
    tool_calls: list[ToolCallAction] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    """OpenEnv's `Action.metadata`; envhub envs do not read it."""

    def to_envhub(self) -> Action:
        """The action `env.step` takes: the text as a string, or an OpenAI message when calls are given."""
        if not self.tool_calls:
            return self.message
        calls = [
            {"id": call.id or f"call_{i}", "type": "function", "function": {"name": call.name, "arguments":
                call.arguments}}
            for i, call in enumerate(self.tool_calls)
        ]  # fmt: skip
        return {"content": self.message, "tool_calls": calls}


class EnvhubObservation(BaseModel):
    """What an envhub env said after a reset or a step, as OpenEnv's `observation` dict."""

    messages: list[dict[str, Any]]
    """The env's new messages in OpenAI's chat format (images as data URLs)."""
    text: str
    """Their text, joined by newlines: what a text-only agent reads."""
    truncated: bool = False
    """The episode hit its turn limit (OpenEnv's `done` is terminated or truncated)."""
    info: dict[str, Any] = Field(default_factory=dict)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """At reset: the tools the agent may call, in OpenAI's `function` tool format."""

    @classmethod
    def of(
        cls,
        observation: Observation,
        info: dict[str, Any],
        *,
        truncated: bool = False,
        env: Env | None = None,
    ) -> EnvhubObservation:
        """The observation of a step, or of a reset when `env` is given (its tools are listed then)."""
        return cls(
            messages=[m.to_openai() for m in observation],
            text="\n".join(m.text for m in observation),
            truncated=truncated,
            info=info,
            tools=[t.to_openai() for t in env.tools] if env is not None else [],
        )


class EnvhubState(BaseModel):
    """OpenEnv's `state`: its episode id and step count, and which envhub env and seed."""

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    step_count: int = 0
    env_id: str
    seed: int | None = None
    done: bool = False


ROOT = ""
"""The env id the root's endpoints stand for when several ids are served: none (they list the ids)."""


def openenv_routes(served: list[str]) -> list[BaseRoute]:
    """The OpenEnv endpoints of every served id under `/openenv/ID`, and at the root: the served id's
    when there is one, a list of the ids when there are several."""
    root = served[0] if len(served) == 1 else ROOT
    return _endpoints(PREFIX + "/{env_id:path}", None) + _endpoints("", root)


def _endpoints(base: str, env_id: str | None) -> list[BaseRoute]:
    """OpenEnv's endpoints under `base`; the env id is `env_id`, or the path's `{env_id}` when None."""

    def bound(handler: Callable[[Request, str], Awaitable[JSONResponse]]) -> Callable[..., Any]:
        async def endpoint(request: Request) -> JSONResponse:
            return await handler(request, request.path_params["env_id"] if env_id is None else env_id)

        return endpoint

    async def session(ws: WebSocket) -> None:
        await _session(ws, ws.path_params["env_id"] if env_id is None else env_id)

    routes: list[BaseRoute] = [
        WebSocketRoute(f"{base}/ws", session),
        Route(f"{base}/reset", bound(_reset), methods=["POST"]),
        Route(f"{base}/step", bound(_step), methods=["POST"]),
        Route(f"{base}/state", bound(_state), methods=["GET"]),
        Route(f"{base}/schema", bound(_schema), methods=["GET"]),
        Route(f"{base}/metadata", bound(_metadata), methods=["GET"]),
    ]
    if base:  # at the root, envhub's own /health answers
        routes.append(Route(f"{base}/health", bound(_health), methods=["GET"]))
    return routes


def _refusal(connection: HTTPConnection, env_id: str) -> p.Error | None:
    """Why `connection` may not have a session of `env_id`, in words an OpenEnv client can act on."""
    state: ServeState = connection.app.state.serve
    base = _base_url(connection)
    if env_id == ROOT:
        served = state.served()
        bases = ", ".join(f"{base}{PREFIX}/{served_id}" for served_id in served)
        message = (
            f"this server serves several envs, {served}: give the OpenEnv client one's base URL: {bases}"
        )
        return p.Error(kind="unknown_env", message=message)
    netloc = base.partition("://")[2]
    advice = (
        "OpenEnv clients send it as the base URL's user info (Basic auth): "
        f"base_url='http://envhub:TOKEN@{netloc}{_openenv_base(connection)}'"
    )
    refusal = state.refusal(
        p.presented_token(connection.headers, connection.query_params), env_id, advice=advice
    )
    if refusal is not None and refusal.kind == "unknown_env":
        bases = ", ".join(f"{base}{PREFIX}/{served_id}" for served_id in state.served())
        return p.Error(kind="unknown_env", message=f"{refusal.message}: OpenEnv base URLs {bases}")
    return refusal


def _base_url(connection: HTTPConnection) -> str:
    """`http://HOST:PORT` as the client addressed this server (its Host header)."""
    scheme = "https" if connection.url.scheme in ("https", "wss") else "http"
    return f"{scheme}://{connection.headers.get('host', connection.url.netloc)}"


def _openenv_base(connection: HTTPConnection) -> str:
    """The OpenEnv base path the client used: its request path less the endpoint (`/ws`, `/schema`...)."""
    return connection.url.path.rstrip("/").rpartition("/")[0]


def _refused(refusal: p.Error, state: ServeState) -> JSONResponse:
    body: dict[str, Any] = {"detail": refusal.message}
    if refusal.kind == "unknown_env":
        body["envs"] = state.served()
    return JSONResponse(body, status_code=p.REFUSAL_HTTP_STATUS.get(refusal.kind, 400))


async def _session(ws: WebSocket, env_id: str) -> None:
    """One OpenEnv session: refused (token, unknown id, full) with openenv-core's error frame, or served
    as the serve session any protocol gets, until the client closes, leaves or idles past the lease."""
    state: ServeState = ws.app.state.serve
    refusal = _refusal(ws, env_id)
    if refusal is not None:
        state.counts[f"refused_{refusal.kind}"] += 1
        await _refuse(ws, refusal, state)
        return
    await hold(ws, state, state.env_ids[env_id], _OpenEnv(state.env_ids[env_id]))  # resolved by the check


async def _refuse(ws: WebSocket, refusal: p.Error, state: ServeState) -> None:
    """Say why in openenv-core's error frame, as the reply to the client's first frame, then close.

    The frame is sent at once, before the client's (it reads it as the answer it awaits); the server
    then waits, within `--open-timeout`, for that first frame before closing, so that the client's send
    does not meet a closed socket. The pre-open frame cap holds meanwhile (the socket is unauthorised).
    """
    code, extra = wire.SESSION_ERROR, dict[str, Any]()
    if refusal.kind == "busy":  # what openenv-core's own refusal of a full server carries
        code = wire.CAPACITY_REACHED
        extra = {"active_sessions": state.active, "max_sessions": state.max_sessions}
    elif refusal.kind == "unknown_env":
        extra = {"envs": state.served()}
    await ws.accept()
    with contextlib.suppress(TimeoutError, WebSocketDisconnect, KeyError):
        await ws.send_text(wire.ErrorFrame.of(code, refusal.message, **extra).model_dump_json())
        await asyncio.wait_for(ws.receive_text(), state.open_seconds)
        await ws.close(code=p.REFUSAL_CLOSE_CODE.get(refusal.kind, p.CLOSE_AUTH), reason=refusal.kind)


class _OpenEnv:
    """OpenEnv's protocol at the edge of one session (an `Edge`): its frames read into the session's
    calls, its answers and openenv-core's error codes written back, and OpenEnv's episode state kept."""

    silent_reason = "no message in time"

    def __init__(self, env_id: str) -> None:
        self.episode = EnvhubState(env_id=env_id)

    def lease_frame(self, message: str) -> str:
        return wire.ErrorFrame.of(wire.SESSION_ERROR, message).model_dump_json()

    async def answer(self, session: Session, text: str) -> Reply | None:
        """The reply to one frame (None for `close`). Any first frame authorises the session when no
        token is set, and the env is made for it (so a socket that never speaks costs no env)."""
        if not session.authorised:
            session.authorise()
        if session.env is None:
            try:
                await session.make()
            except Exception as exc:  # any failure to make the env is the factory's
                message = f"could not make {session.env_id}: {type(exc).__name__}: {exc}"
                return Reply(wire.ErrorFrame.of(wire.FACTORY_ERROR, message).model_dump_json(), last=True)
        try:
            frame = wire.client_frame.validate_json(text)
        except ValidationError as exc:
            return Reply(_unreadable(text, exc).model_dump_json())
        if isinstance(frame, wire.Close):
            return None
        return Reply(_json(await self.reply(session, frame)))

    async def reply(self, session: Session, frame: wire.Reset | wire.Step | wire.State) -> BaseModel:
        try:
            if isinstance(frame, wire.Reset):
                return wire.ObservationFrame(data=await self.reset(session, frame.data))
            if isinstance(frame, wire.Step):
                return wire.ObservationFrame(data=await self.step(session, frame.data))
            return wire.StateFrame(data=self.episode.model_dump())
        except ValidationError as exc:  # the action (or a reset option) does not fit the schema
            errors = wire.validation_errors(exc)
            return wire.ErrorFrame.of(wire.VALIDATION_ERROR, "Invalid message", errors=errors)
        except EpisodeStateError as exc:
            return wire.ErrorFrame.of(wire.EXECUTION_ERROR, str(exc))
        except Exception as exc:  # the env's own failure: the machinery, not the agent
            session.env_failed()
            return wire.ErrorFrame.of(wire.EXECUTION_ERROR, f"{type(exc).__name__}: {exc}")

    async def reset(self, session: Session, data: dict[str, Any]) -> wire.StepData:
        request = wire.ResetRequest.model_validate(data)
        observation, info = await session.reset(seed=request.seed, options=request.model_extra or None)
        self.episode = EnvhubState(
            episode_id=request.episode_id or str(uuid.uuid4()), env_id=session.env_id, seed=info.get("seed")
        )
        return wire.StepData(observation=_dump(EnvhubObservation.of(observation, info, env=session.env)))

    async def step(self, session: Session, data: dict[str, Any]) -> wire.StepData:
        result = await session.step(EnvhubAction.model_validate(data).to_envhub())
        done = result.terminated or result.truncated
        self.episode = self.episode.model_copy(
            update={"step_count": self.episode.step_count + 1, "done": done}
        )
        observation = EnvhubObservation.of(result.observation, result.info, truncated=result.truncated)
        return wire.StepData(observation=_dump(observation), reward=result.reward, done=done)


def _unreadable(text: str, exc: ValidationError) -> wire.ErrorFrame:
    """openenv-core's answer to a frame it cannot read: bad JSON, an unknown type, or a bad shape."""
    try:
        kind = json.loads(text).get("type", "")
    except (ValueError, AttributeError):
        return wire.ErrorFrame.of(wire.INVALID_JSON, f"Invalid JSON: {text[:200]!r}")
    if kind not in ("reset", "step", "state", "close"):
        return wire.ErrorFrame.of(wire.UNKNOWN_TYPE, f"Unknown message type: {kind}")
    return wire.ErrorFrame.of(wire.VALIDATION_ERROR, "Invalid message", errors=wire.validation_errors(exc))


def _dump(observation: EnvhubObservation) -> dict[str, Any]:
    """The observation as JSON data; an `info` value JSON cannot carry fails here, as the env's fault."""
    return json.loads(observation.model_dump_json())  # type: ignore[no-any-return]


def _json(reply: BaseModel) -> str:
    return reply.model_dump_json()


# The HTTP endpoints. openenv-core's `/reset` and `/step` make a fresh env per request (its stateless
# mode); an envhub env keeps its episode between steps, so `/reset` answers a fresh episode's first
# observation and `/step` points to the websocket, where episodes are played.


async def _reset(request: Request, env_id: str) -> JSONResponse:
    state: ServeState = request.app.state.serve
    refusal = _refusal(request, env_id)
    if refusal is not None:
        return _refused(refusal, state)
    try:
        body = wire.ResetRequest.model_validate(await _body(request, {}))
    except (ValidationError, ValueError) as exc:
        return _unprocessable(exc)
    state.active += 1  # a stateless reset is a session too, for its one request
    session = Session(state, state.env_ids[env_id], request.client)
    try:
        env = await session.make()
        observation, info = await session.reset(seed=body.seed, options=body.model_extra or None)
        data = wire.StepData(observation=_dump(EnvhubObservation.of(observation, info, env=env)))
    except Exception as exc:  # the env's machinery: a server error, as openenv-core's 500
        session.env_failed()
        return JSONResponse({"detail": f"{type(exc).__name__}: {exc}"}, status_code=500)
    finally:
        try:
            await session.close()
        finally:
            state.active -= 1
    return JSONResponse(data.model_dump(mode="json"))


async def _step(request: Request, env_id: str) -> JSONResponse:
    refusal = _refusal(request, env_id)
    if refusal is not None and refusal.kind != "busy":
        return _refused(refusal, request.app.state.serve)
    try:
        EnvhubAction.model_validate(wire.StepRequest.model_validate(await _body(request, None)).action)
    except (ValidationError, ValueError) as exc:
        return _unprocessable(exc)
    detail = (
        "an envhub env keeps its episode between steps, and a stateless POST /step has none: play the "
        "episode over the websocket at /ws (what OpenEnv's EnvClient and GenericEnvClient do)"
    )
    return JSONResponse({"detail": detail}, status_code=409)


async def _state(request: Request, env_id: str) -> JSONResponse:
    refusal = _refusal(request, env_id)
    if refusal is not None and refusal.kind != "busy":
        return _refused(refusal, request.app.state.serve)
    state: ServeState = request.app.state.serve
    return JSONResponse(EnvhubState(env_id=state.env_ids[env_id]).model_dump())


async def _schema(request: Request, env_id: str) -> JSONResponse:
    refusal = _refusal(request, env_id)
    if refusal is not None and refusal.kind != "busy":
        return _refused(refusal, request.app.state.serve)
    schemas = wire.Schemas(
        action=EnvhubAction.model_json_schema(),
        observation=EnvhubObservation.model_json_schema(),
        state=EnvhubState.model_json_schema(),
    )
    return JSONResponse(schemas.model_dump())


async def _metadata(request: Request, env_id: str) -> JSONResponse:
    """openenv-core's `EnvironmentMetadata`, from the env's spec (no env is made)."""
    refusal = _refusal(request, env_id)
    if refusal is not None and refusal.kind != "busy":
        return _refused(refusal, request.app.state.serve)
    state: ServeState = request.app.state.serve
    spec = registry.spec(state.env_ids[env_id])
    source = spec.provenance.package or spec.provenance.entry_point or "envhub"
    return JSONResponse(
        {
            "name": spec.id,
            "description": f"envhub env {spec.id} from {source}, served by envhub serve",
            "readme_content": None,
            "version": spec.provenance.package_version,
            "author": None,
            "documentation_url": None,
        }
    )


async def _health(request: Request, env_id: str) -> JSONResponse:
    return JSONResponse({"status": "healthy"})


async def _body(request: Request, default: dict[str, Any] | None) -> Any:
    """The JSON body (`default` when empty, as openenv-core's reset takes no body); ValueError if not JSON."""
    raw = await request.body()
    return json.loads(raw) if raw.strip() else default


def _unprocessable(exc: ValidationError | ValueError) -> JSONResponse:
    detail = wire.validation_errors(exc) if isinstance(exc, ValidationError) else str(exc)
    return JSONResponse({"detail": detail}, status_code=422)
