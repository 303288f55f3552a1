"""`envhub.make("openenv:URL")`: an env served by an OpenEnv server (package `openenv-core`), played
over its websocket protocol under envhub's contract.

The action: OpenEnv envs take a typed action (a pydantic model the server publishes at `/schema`); the
agent sees it as one tool whose parameters are that schema, and may instead reply in text when the
action has exactly one text field (an echo env's `message`, a coding env's `code`), or with the action
as a JSON object. The observation: OpenEnv's observation dict becomes one message (its only text field,
or the dict as JSON; chat `messages` in OpenAI's format, as `envhub serve` sends, are taken as they
are), and the whole dict is in `info["openenv"]["observation"]`; reward and done map directly.

Errors keep their kind: an action the server refuses (`VALIDATION_ERROR`) is the agent's mistake,
answered as an error observation; an env that raises on the server, a full server, a dropped
connection or an HTTP 5xx is an `InfrastructureError` (the runner retries the episode).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import ValidationError

from envhub.authoring.chat import ChatEnv, Reaction
from envhub.core import InfrastructureError
from envhub.inference.client import bearer
from envhub.integrations.openenv import wire
from envhub.messages import Message, ToolCall, tool_result, user
from envhub.settings import settings, variable
from envhub.tools import ToolSpec
from envhub.websocket import Connection, Refused

_WS_SCHEMES = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}

TOKEN_ENV = variable("openenv_token")
"""The environment variable whose value, when set, is sent to OpenEnv servers as `Bearer TOKEN`. Read
from the environment, not the id or an option, because both are stored with every episode."""


class OpenEnvAccessDenied(PermissionError):
    """The OpenEnv server refused this client's credentials (HTTP 401 or 403)."""


def split_url(url: str) -> tuple[str, str]:
    """`http://h:1/p` → (`http://h:1/p`, `ws://h:1/p/ws`): where `/schema` is asked and the session runs.

    The URL is the base an OpenEnv client is given (its `base_url`); user info (`USER:TOKEN@`) stays in
    both, so the server gets it as Basic auth.
    """
    parts = urlsplit(url.rstrip("/"))
    if parts.scheme not in _WS_SCHEMES or not parts.netloc:
        raise ValueError(
            f"an OpenEnv env id looks like openenv:http://HOST:PORT (or https, ws, wss), got {url!r}"
        )
    http_scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    http = urlunsplit((http_scheme, parts.netloc, parts.path, "", ""))
    ws = urlunsplit((_WS_SCHEMES[parts.scheme], parts.netloc, f"{parts.path}/ws", "", ""))
    return http, ws


def fetch_schemas(http_base: str, headers: dict[str, str]) -> wire.Schemas:
    """The server's `/schema` (asked when the env is made, as `make` is synchronous)."""
    try:
        response = httpx.get(f"{http_base}/schema", headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        raise InfrastructureError(f"could not reach the OpenEnv server at {http_base}: {exc}") from exc
    if response.status_code in (401, 403):
        raise OpenEnvAccessDenied(
            f"{http_base} refused this client ({response.status_code}): set {TOKEN_ENV} to the token "
            "the server wants"
        )
    if response.status_code >= 500:
        raise InfrastructureError(f"{http_base}/schema failed with HTTP {response.status_code}")
    try:
        response.raise_for_status()
        return wire.Schemas.model_validate(response.json())
    except (httpx.HTTPStatusError, ValueError) as exc:
        raise ValueError(f"{http_base} does not look like an OpenEnv server: GET /schema gave {exc}") from exc


def _token() -> str | None:
    secret = settings().openenv_token
    return None if secret is None else secret.get_secret_value()


def session_capacity(url: str) -> int | None:
    """How many sessions at once the server at `url` allows, when it says so: `max_sessions` in its
    `/health`, under the env's base or at the server's root (where `envhub serve` reports it). An
    openenv-core server says it only when it refuses one session too many (`CAPACITY_REACHED`, with
    `max_sessions`), so for one this is None."""
    http, _ = split_url(url)
    parts = urlsplit(http)
    root = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    headers = bearer(_token())
    for health in dict.fromkeys((f"{http}/health", f"{root}/health")):
        try:
            response = httpx.get(health, headers=headers, timeout=10)
            stated = response.json().get("max_sessions") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        if isinstance(stated, int) and not isinstance(stated, bool) and stated >= 1:
            return stated
    return None


def rollout_concurrency(env_id: str, usual: int) -> tuple[int, str | None]:
    """The episodes a batch of `env_id` plays at once by default, and a note when that is not `usual`:
    for an `openenv:URL` id, never more than the server's sessions (1 when it does not say: the
    default of openenv-core's servers, `max_concurrent_envs=1`), so no episode is refused as busy."""
    if not env_id.startswith("openenv:"):
        return usual, None
    capacity = session_capacity(env_id.removeprefix("openenv:"))
    if capacity is None:
        return 1, (
            f"{env_id}: the server does not say how many sessions it allows; playing 1 episode at a time "
            "(openenv-core's default); --concurrency N plays more"
        )
    if capacity < usual:
        return capacity, f"{env_id}: the server allows {capacity} sessions; playing {capacity} at a time"
    return usual, None


@dataclass(frozen=True)
class ActionShape:
    """How an agent's message becomes the server's action: a call to one tool, or text in a field."""

    tool: ToolSpec
    text_field: str | None
    """The action's only text field, which a plain-text reply fills; None when it has none or several."""

    @classmethod
    def of(cls, schema: dict[str, Any]) -> ActionShape:
        """From the action's JSON schema, less OpenEnv's `metadata` (which is not the agent's to set)."""
        properties = {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}
        parameters = {k: v for k, v in schema.items() if k not in ("title", "description")}
        parameters["properties"] = properties
        parameters["required"] = [r for r in schema.get("required", []) if r != "metadata"]
        texts = [name for name, field in properties.items() if field.get("type") == "string"]
        name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title") or "")) or "action"
        description = str(schema.get("description") or "The environment's action.")
        tool = ToolSpec(name=name, description=description, parameters=parameters)
        return cls(tool, texts[0] if len(texts) == 1 else None)

    def read(self, message: Message) -> tuple[dict[str, Any], ToolCall | None]:
        """The action a message asks for and the call it came in; ValueError (for the agent) if none."""
        if message.tool_calls:
            if len(message.tool_calls) > 1:
                count = len(message.tool_calls)
                raise ValueError(f"call one tool per turn (each call is one step of the env), got {count}")
            call = message.tool_calls[0]
            if call.name != self.tool.name:
                raise ValueError(f"unknown tool {call.name!r}; available tools: {self.tool.name}")
            return _json_object(call.arguments, f"the arguments of {call.name}"), call
        if self.text_field is not None:
            return {self.text_field: message.text}, None
        if message.text.strip().startswith("{"):
            return _json_object(message.text, "the action"), None
        raise ValueError(
            f"call the tool {self.tool.name} with the action (or reply with it as a JSON object)"
        )


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def observation_messages(observation: dict[str, Any], call: ToolCall | None) -> list[Message]:
    """OpenEnv's observation dict as what the agent reads (see the module docstring for the rules)."""
    chat = observation.get("messages")
    if isinstance(chat, list) and chat and all(isinstance(m, dict) and "role" in m for m in chat):
        with contextlib.suppress(ValidationError, ValueError):
            return [Message.from_openai(m) for m in chat]
    only = next(iter(observation.values())) if len(observation) == 1 else None
    text = only if isinstance(only, str) else json.dumps(observation)
    return [tool_result(call.id, text, name=call.name)] if call is not None else [user(text)]


class OpenEnvEnv(ChatEnv):
    """An OpenEnv server's env; one websocket session per env, reset in place for each episode."""

    reference_reward = None  # OpenEnv envs publish no reference solution
    reset_options = None  # sent as OpenEnv's reset arguments: the server checks them (`setup`)

    def __init__(self, url: str, *, max_turns: int | None = None, timeout: float = 300.0) -> None:
        super().__init__(max_turns=max_turns)
        self.url, self.ws_url = split_url(url)
        self.timeout = timeout
        self._headers = bearer(_token())
        self.schemas = fetch_schemas(self.url, self._headers)
        self.action = ActionShape.of(self.schemas.action)
        self._socket: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()
        self._observation: dict[str, Any] = {}

    @property
    def tools(self) -> list[ToolSpec]:
        return [self.action.tool]

    async def setup(self, rng: random.Random) -> list[Message]:
        """Reset the server's env with this episode's seed (and the reset options, as OpenEnv's reset
        keyword arguments)."""
        reply = await self._ask(wire.Reset(data={**self.options, "seed": self.seed}))
        if isinstance(reply, wire.ErrorFrame) and reply.data.code == wire.VALIDATION_ERROR:
            raise ValueError(f"{self.url} refused the reset options {self.options}: {_errors(reply)}")
        data = self._observed(reply, "reset")
        self._observation = data.observation
        return observation_messages(data.observation, None)

    def reset_info(self) -> dict[str, Any]:
        return {"openenv": {"url": self.url, "observation": self._observation}}

    async def react(self, message: Message) -> Reaction:
        try:
            action, call = self.action.read(message)
        except ValueError as exc:
            return _mistake(message, str(exc), "malformed_action")
        reply = await self._ask(wire.Step(data=action))
        if isinstance(reply, wire.ErrorFrame) and reply.data.code == wire.VALIDATION_ERROR:
            return _mistake(
                message, f"the environment refused the action: {_errors(reply)}", "refused_action"
            )
        data = self._observed(reply, "step")
        return Reaction(
            observation=observation_messages(data.observation, call),
            done=data.done,
            reward=float(data.reward or 0.0),
            info={"openenv": {"observation": data.observation}},
        )

    async def state(self) -> dict[str, Any]:
        """The server env's `state` (OpenEnv's episode id, step count and whatever the env adds)."""
        reply = await self._ask(wire.State())
        if not isinstance(reply, wire.StateFrame):
            raise self._failure(reply, "state")
        return reply.data

    async def close(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close(wire.Close().model_dump_json())

    def _observed(self, reply: wire.Reply, asked: str) -> wire.StepData:
        if not isinstance(reply, wire.ObservationFrame):
            raise self._failure(reply, asked)
        return reply.data

    def _failure(self, reply: wire.Reply, asked: str) -> Exception:
        """What a reply other than the one asked for means: the server's machinery failed."""
        if isinstance(reply, wire.ErrorFrame):
            capacity = (reply.data.model_extra or {}).get("max_sessions")
            advice = (
                f" (the server allows {capacity} sessions at once: play at most that many, "
                f"e.g. `envhub rollout --concurrency {capacity}`)"
                if reply.data.code == wire.CAPACITY_REACHED and isinstance(capacity, int)
                else ""
            )
            return InfrastructureError(
                f"{self.url} failed the {asked} ({reply.data.code}): {reply.data.message}{advice}"
            )
        return InfrastructureError(f"{self.url} answered {reply.type!r} to a {asked}")

    async def _ask(self, frame: wire.Reset | wire.Step | wire.State) -> wire.Reply:
        """Send one frame and read its answer; a lost connection is an InfrastructureError."""
        if self._socket is not None and self._loop is not asyncio.get_running_loop():
            # A socket serves only the event loop that opened it: a new episode opens another session.
            self._socket, self._lock = None, asyncio.Lock()
            if not isinstance(frame, wire.Reset):
                raise InfrastructureError(
                    f"{self.ws_url}: the episode's session was opened in another event loop; reset() here"
                )
        async with self._lock:
            socket = self._socket or await self._connect()
            try:
                text = await socket.ask(frame.model_dump_json(), reply_seconds=self.timeout)
            except InfrastructureError:
                self._socket = None
                raise
        try:
            reply = wire.server_frame.validate_json(text)
        except ValidationError as exc:
            raise InfrastructureError(f"{self.ws_url} sent a frame not in OpenEnv's protocol: {exc}") from exc
        if isinstance(reply, wire.ErrorFrame) and reply.data.code != wire.VALIDATION_ERROR:
            await self.close()  # the server may have ended the session; the next reset opens a new one
        return reply

    async def _connect(self) -> Connection:
        try:
            self._socket = await Connection.open(self.ws_url, self._headers, what="the OpenEnv server")
        except Refused as refused:
            raise InfrastructureError(
                f"could not connect to the OpenEnv server at {self.ws_url}: {refused}"
            ) from refused
        self._loop = asyncio.get_running_loop()
        return self._socket


def _errors(reply: wire.ErrorFrame) -> str:
    """A refusal's validation errors in a line: `field: what is wrong` for each."""
    errors = (reply.data.model_extra or {}).get("errors") or []
    parts = [
        f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in errors if isinstance(e, dict)
    ]
    return "; ".join(parts) or reply.data.message


def _mistake(message: Message, error: str, kind: str) -> Reaction:
    """The agent's mistake answered to it: one error per tool call, or one user message."""
    text = f"Error: {error}"
    observation = [tool_result(c.id, text, name=c.name) for c in message.tool_calls] or [user(text)]
    return Reaction(observation=observation, info={"error": {"kind": kind, "message": error}})
