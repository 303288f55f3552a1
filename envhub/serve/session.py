"""The one session of `envhub serve`, whichever protocol drives it: envhub's own (`envhub.serve.server`)
or OpenEnv's (`envhub.integrations.openenv.routes`).

A session is one websocket and one env, made for it. What every session shares lives here once: the
slot it holds under `--max-sessions`, the authorisation that moves it past the doors' pre-open limits,
the `--open-timeout` deadline, the idle lease that reaps it, the env's make, reset, step and close, and
the counters `/metrics` reports. A protocol is an `Edge`: it reads its own frames into the session's
calls and writes the answers as its own frames, and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from envhub.core import Action, Env, Observation, StepResult
from envhub.messages import Message
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
    """How long a websocket may go unauthorised: without a token, from the upgrade to its first frame."""
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


@dataclass(frozen=True)
class Reply:
    """A protocol's answer to one frame, as the text to send; `last` ends the session after it."""

    text: str
    last: bool = False


class Edge(Protocol):
    """One protocol at the edge of a session: its frames read into the session's calls, its answers."""

    silent_reason: str
    """The close reason of a socket that sent no first frame within `--open-timeout`."""

    async def answer(self, session: Session, text: str) -> Reply | None:
        """The reply to one frame's text, or None when the frame closes the session."""
        ...

    def lease_frame(self, message: str) -> str:
        """The frame that tells a client its idle session was reaped, saying `message`."""
        ...


class Session:
    """One websocket's env, for any protocol: the slot, the deadlines, the env's calls, the counters."""

    def __init__(self, state: ServeState, env_id: str, peer: Any) -> None:
        self.state, self.env_id, self.peer = state, env_id, peer
        self.env: Env | None = None
        self.open_by = time.monotonic() + state.open_seconds
        self.authorised = False

    def authorise(self) -> None:
        """The token was right (at the upgrade), or, with none set, the client sent its first frame
        (envhub's: its `open`): from here on the session has the lease and a session's frame cap."""
        self.authorised = True
        self.state.doors.authorised(self.peer)

    async def serve(self, ws: WebSocket, edge: Edge) -> None:
        """Answer frames until the client closes, leaves, idles past the lease or says nothing in time."""
        while (text := await self.receive(ws, edge)) is not None:
            reply = await edge.answer(self, text)
            if reply is None:
                return  # the client's close; Starlette closes the socket once the handler returns
            await ws.send_text(reply.text)
            if reply.last:
                return

    async def receive(self, ws: WebSocket, edge: Edge) -> str | None:
        """The next frame's text; None when the client left, idled past the lease (then reaped), or,
        unauthorised, sent nothing that authorised it by its deadline."""
        opening = not self.authorised
        wait = max(self.open_by - time.monotonic(), 0.0) if opening else self.state.lease_seconds
        try:
            return await asyncio.wait_for(ws.receive_text(), wait)
        except (WebSocketDisconnect, KeyError):  # KeyError: a binary frame, which no client of ours sends
            return None
        except TimeoutError:
            if opening:
                self.state.counts["open_timeouts"] += 1
                await ws.close(code=p.CLOSE_LEASE, reason=edge.silent_reason)
                return None
            self.state.counts["sessions_reaped"] += 1
            message = f"the session was idle past its lease ({self.state.lease_seconds:g} s) and closed"
            await ws.send_text(edge.lease_frame(message))
            await ws.close(code=p.CLOSE_LEASE, reason="lease")
            return None

    async def make(self, *, max_turns: int | None = None, kwargs: dict[str, Any] | None = None) -> Env:
        """Make this session's env (in a thread: a make may build a sandbox); the caller's options'
        errors (TypeError, ValueError) and the env's own propagate for the edge to word."""
        self.env = await asyncio.to_thread(registry.make, self.env_id, max_turns=max_turns, **(kwargs or {}))
        self.state.counts["sessions_opened"] += 1
        return self.env

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        assert self.env is not None  # each edge makes the env before it resets
        observation, info = await self.env.reset(seed=seed, options=options)
        self.state.counts["episodes"] += 1
        return observation, info

    async def step(self, action: Action) -> StepResult:
        assert self.env is not None
        started = time.perf_counter()
        result = await self.env.step(action)
        self.state.step_seconds += time.perf_counter() - started
        self.state.counts["steps"] += 1
        return result

    async def reference(self, messages: list[Message]) -> Action | None:
        assert self.env is not None
        return await asyncio.to_thread(self.env.reference_action, messages)

    def env_failed(self) -> None:
        """Count a failure of the env's own machinery (the client sees it as the infrastructure's)."""
        self.state.counts["env_errors"] += 1

    async def close(self) -> None:
        if self.env is not None:
            with contextlib.suppress(Exception):  # the session is over either way
                await self.env.close()
            self.env = None


async def hold(ws: WebSocket, state: ServeState, env_id: str, edge: Edge) -> None:
    """Take a slot for an upgrade that passed `state.refusal` (no await since: the count cannot
    overshoot), accept, serve the session through `edge`, and give the slot and the env back."""
    state.active += 1
    session = Session(state, env_id, ws.scope.get("client"))
    try:
        if state.token is not None:
            session.authorise()
        await ws.accept()
        await session.serve(ws, edge)
    except WebSocketDisconnect:
        pass  # the client left mid-answer: its episode is over, the env is closed below
    finally:
        try:
            await session.close()
        finally:
            state.active -= 1
