"""A remote environment: `envhub.make("ws://host:port/ID")` plays an env served by `envhub serve`.

Same async contract as an in-process env. The agent's mistakes come back as the env's own error
observation (the server's env answers them); anything else that goes wrong keeps its kind: a crash
on the server or a dropped connection is an `InfrastructureError` (the runner retries the episode),
a step before reset an `EpisodeStateError`. Each `reset` opens a fresh session, so a reused env never
carries one episode's state into the next. Imports nothing of the registry: it finds this module's
`resolver` by the `envhub.schemes` entry points (ws, wss, http, https) in envhub's pyproject.toml.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from envhub.core import Action, Env, EnvSpec, EpisodeStateError, InfrastructureError, Observation, StepResult
from envhub.env_spec import refuse_unknown_options
from envhub.inference.client import bearer
from envhub.messages import Message
from envhub.serve import protocol as p
from envhub.settings import settings, variable
from envhub.tools import ToolSpec
from envhub.websocket import Connection, Refused

_Reply = TypeVar("_Reply", p.Hello, p.ResetDone, p.StepDone, p.ReferenceDone)

TOKEN_ENV = variable("serve_token")
"""The environment variable a client reads its token from when none is given."""

_SCHEMES = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}


class RemoteAccessDenied(PermissionError):
    """The server wants a token this client did not send (or sent wrong); set ENVHUB_SERVE_TOKEN."""


class UnknownRemoteEnv(LookupError):
    """The server does not serve this id."""


def split_url(url: str) -> tuple[str, str]:
    """`http://h:1/ns/id-v0` → (`ws://h:1`, `ns/id-v0`): the server's websocket base and the env id."""
    parts = urlsplit(url)
    scheme = _SCHEMES.get(parts.scheme)
    env_id = parts.path.strip("/")
    if scheme is None or not parts.netloc or not env_id:
        raise ValueError(f"a remote env id looks like ws://HOST:PORT/ENV_ID (or http/https/wss), got {url!r}")
    return urlunsplit((scheme, parts.netloc, "", "", "")), env_id


def remote_spec(base: str, served: EnvSpec) -> EnvSpec:
    """The served env's spec as seen from here: its id is the URL (so a batch replays it remotely), its
    provenance the server's with the entry point naming where the env ran."""
    url = f"{base}/{served.id}"
    provenance = served.provenance.model_copy(
        update={"entry_point": f"remote {url} ({served.provenance.entry_point})"}
    )
    return served.model_copy(update={"id": url, "provenance": provenance})


def fetch_spec(url: str, *, token: str | None = None) -> EnvSpec:
    """The spec `envhub.spec(url)` gives: the server's, asked over HTTP, seen from here."""
    base, env_id = split_url(url)
    return remote_spec(base, _served_spec(base, env_id, _headers(token).get("Authorization")))


@functools.lru_cache(maxsize=256)
def _served_spec(base: str, env_id: str, authorization: str | None) -> EnvSpec:
    """The served env's spec, asked once per server, id and token: `make(url)` is synchronous, so each
    call it saves is a round trip that would otherwise block the event loop of a batch."""
    http_base = base.replace("ws", "http", 1)
    headers = {"Authorization": authorization} if authorization else {}
    try:
        response = httpx.get(f"{http_base}/{env_id}", headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        raise InfrastructureError(f"could not reach the env server at {http_base}: {exc}") from exc
    if response.status_code != 200:
        _raise(p.Error.model_validate(response.json()), f"{base}/{env_id}")
    return p.Description.model_validate(response.json()).spec


def serve_token() -> str | None:
    """The token for `envhub serve` this process was given ($ENVHUB_SERVE_TOKEN), or None."""
    secret = settings().serve_token
    return None if secret is None else secret.get_secret_value()


def _headers(token: str | None) -> dict[str, str]:
    return bearer(token if token is not None else serve_token())


def _raise(error: p.Error, url: str) -> None:
    """Raise the error a remote failure means here, keeping its kind."""
    if error.kind == "auth":
        raise RemoteAccessDenied(f"{url}: {error.message} (set {TOKEN_ENV})")
    if error.kind == "unknown_env":
        raise UnknownRemoteEnv(f"{url}: {error.message}")
    if error.kind == "episode_state":
        raise EpisodeStateError(f"{url}: {error.message}")
    if error.kind == "bad_request":
        raise ValueError(f"{url}: {error.message}")
    raise InfrastructureError(f"{url}: {error.kind}: {error.message}")


def _refusal(refused: Refused) -> p.Error:
    """The server's reason for refusing a websocket upgrade (its body), or the status when it gave none."""
    try:
        return p.Error.model_validate_json(refused.body)
    except ValueError:
        return p.Error(kind="infrastructure", message=str(refused))


def _at_the_door(refused: Refused) -> bool:
    """A 503 with no envhub reason is a door closed for a moment (envhub.serve.doors), worth a retry; a
    session refused as busy says so, and is not retried."""
    return refused.status == 503 and _refusal(refused).kind == "infrastructure"


class RemoteEnv(Env):
    """An env played over a websocket; one session (one env on the server) per episode."""

    def __init__(
        self,
        url: str,
        *,
        max_turns: int | None = None,
        kwargs: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> None:
        self.base, self.env_id = split_url(url)
        self.url = f"{self.base}/{self.env_id}"
        self.kwargs = dict(kwargs or {})
        self._max_turns = max_turns
        self._headers = _headers(token)
        self._tools: list[ToolSpec] = []
        self._socket: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()
        if max_turns is not None:
            self.max_turns = max_turns
        # The server's spec from the start (the runner records it before reset); each session's
        # hello refreshes it with what the env was made with there (its max_turns).
        served = _served_spec(self.base, self.env_id, self._headers.get("Authorization"))
        self.spec = remote_spec(self.base, served).model_copy(
            update={"max_turns": max_turns, "env_kwargs": self.kwargs}
        )
        self.url = self.spec.id
        # Options are refused here, at make, as for a local env: the server's spec names the ones its
        # env takes (None from a server that does not say: it refuses them when the session opens).
        self.spec.check_options(self.kwargs)

    @property
    def tools(self) -> list[ToolSpec]:
        return list(self._tools)

    def check_reset_options(self, options: dict[str, Any] | None) -> None:
        """The served env's reset options, from its spec; a server that names none checks them itself."""
        assert self.spec is not None  # set in __init__
        refuse_unknown_options(self.url, options or {}, self.spec.reset_options, at="reset")

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self.check_reset_options(options)  # before a session is opened for them
        await self.close()  # the previous episode's session, if any
        await self._open()
        done = await self._ask(p.Reset(seed=seed, options=options), p.ResetDone)
        return done.observation, done.info

    async def step(self, action: Action) -> StepResult:
        if self._socket is None:
            raise EpisodeStateError(f"{self.url}: step() before reset(), or after the episode ended")
        done = await self._ask(p.Step.of(action), p.StepDone)
        if done.terminated or done.truncated:
            await self.close()  # frees the server's slot now, not when the next episode starts
        return StepResult(done.observation, done.reward, done.terminated, done.truncated, done.info)

    def reference_action(self, messages: list[Message]) -> Action | None:
        """The server env's reference action; called from a worker thread, as the oracle policy does."""
        if self._socket is None or self._loop is None:
            return None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("reference_action blocks on the network: call it via asyncio.to_thread")
        future = asyncio.run_coroutine_threadsafe(
            self._ask(p.Reference(messages=messages), p.ReferenceDone), self._loop
        )
        done = future.result()
        return None if done.action is None else done.action.action()

    async def close(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close(p.Close().model_dump_json())

    async def _open(self) -> None:
        try:
            self._socket = await Connection.open(self.url, self._headers, retry_refused=_at_the_door)
        except Refused as refused:  # the server refused the upgrade: its answer says why
            _raise(_refusal(refused), self.url)
        self._loop = asyncio.get_running_loop()
        hello = await self._ask(p.Open(kwargs=self.kwargs, max_turns=self._max_turns), p.Hello)
        self.spec = remote_spec(self.base, hello.spec)
        self.max_turns = hello.spec.max_turns or self.max_turns
        self._tools = hello.tools

    async def _ask(self, frame: p.Open | p.Reset | p.Step | p.Reference, expected: type[_Reply]) -> _Reply:
        """Send one frame and read its answer; a lost connection or server error keeps its kind."""
        socket = self._socket
        if socket is None:
            raise EpisodeStateError(f"{self.url}: the session is closed; reset() to start an episode")
        async with self._lock:
            try:
                reply = p.server_frame.validate_json(await socket.ask(frame.model_dump_json()))
            except InfrastructureError:
                self._socket = None
                raise
        if isinstance(reply, p.Error):
            if reply.kind != "episode_state":
                await self.close()
            _raise(reply, self.url)
        if not isinstance(reply, expected):
            raise InfrastructureError(f"{self.url} answered {reply.type!r} to {frame.type!r}")
        return reply


class _ServedEnvs:
    """The scheme resolver (`envhub.registration.SchemeResolver`) for ids that `envhub serve` serves."""

    def make(self, env_id: str, *, max_turns: int | None, kwargs: dict[str, Any]) -> Env:
        return RemoteEnv(env_id, max_turns=max_turns, kwargs=kwargs)

    def spec(self, env_id: str) -> EnvSpec:
        return fetch_spec(env_id)


resolver = _ServedEnvs()
"""What the `envhub.schemes` entry points name: `make("ws://host:port/ID")` and `spec(URL)` come here."""
