"""The messages of an `envhub serve` session, one pydantic model each, JSON over a websocket.

One websocket is one session is one episode: the client opens it with `Open` (the env's options), the
server answers `Hello` (spec, provenance and tool schemas), then `Reset`, any number of `Step`s and
`Close`. Typed both ways so a client and a server of different builds disagree loudly, not silently.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from envhub.core import Action, EnvSpec
from envhub.messages import Message
from envhub.tools import ToolSpec

PROTOCOL_VERSION = 1

TOKEN_HEADER = "authorization"
"""The header a client sends its token in, as `Bearer TOKEN` (or as Basic auth's password, which is what a
websocket client sends for a URL with user info, `ws://USER:TOKEN@HOST/...`)."""
TOKEN_QUERY = "token"
"""The query parameter that carries the token for clients that cannot set a header (`...?token=TOKEN`)."""

CLOSE_BUSY = 4429
"""Websocket close code of a session refused because the server holds `--max-sessions` already."""
CLOSE_AUTH = 4401
CLOSE_UNKNOWN_ENV = 4404
CLOSE_LEASE = 4408
"""The session sat idle longer than the server's lease and was reaped, or sent no `open` in time."""

REFUSAL_HTTP_STATUS = {"auth": 401, "unknown_env": 404, "busy": 503}
"""The HTTP status of a refused session or request, by its error kind, under either protocol."""
REFUSAL_CLOSE_CODE = {"auth": CLOSE_AUTH, "unknown_env": CLOSE_UNKNOWN_ENV, "busy": CLOSE_BUSY}
"""The websocket close code of a refused session, by its error kind, under either protocol."""


def presented_token(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The token a request carries: `Authorization: Bearer TOKEN`, Basic auth's password, or `?token=`."""
    header = headers.get(TOKEN_HEADER, "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return None
    return query.get(TOKEN_QUERY)


class _Frame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Client → server


class Open(_Frame):
    """Make the env for this session with these options (what `envhub.make` would be given)."""

    type: Literal["open"] = "open"
    kwargs: dict[str, Any] = Field(default_factory=dict)
    max_turns: int | None = None
    protocol: int = PROTOCOL_VERSION


class Reset(_Frame):
    type: Literal["reset"] = "reset"
    seed: int | None = None
    options: dict[str, Any] | None = None


class Step(_Frame):
    """One agent action, in whichever of the accepted forms the caller gave it (kept as given, so an
    action the env finds malformed is answered by the env, not refused by the wire)."""

    type: Literal["step"] = "step"
    message: Message | None = None
    text: str | None = None
    raw: dict[str, Any] | None = None

    @classmethod
    def of(cls, action: Action) -> Step:
        if isinstance(action, Message):
            return cls(message=action)
        if isinstance(action, str):
            return cls(text=action)
        if isinstance(action, dict):
            return cls(raw=action)
        # Not an action at all: sent so that the env answers it as malformed, as it would in-process.
        return cls(raw={"role": "not an action", "content": repr(action)})  # type: ignore[unreachable]

    def action(self) -> Action:
        if self.message is not None:
            return self.message
        if self.raw is not None:
            return self.raw
        return self.text or ""


class Reference(_Frame):
    """Ask for the env's reference action given the conversation (what the oracle policy plays)."""

    type: Literal["reference"] = "reference"
    messages: list[Message]


class Close(_Frame):
    type: Literal["close"] = "close"


ClientFrame = Annotated[Open | Reset | Step | Reference | Close, Field(discriminator="type")]
client_frame: TypeAdapter[Open | Reset | Step | Reference | Close] = TypeAdapter(ClientFrame)


# Server → client


class Hello(_Frame):
    """The session is open: the env's spec (with its provenance) and the tools the agent may call."""

    type: Literal["hello"] = "hello"
    spec: EnvSpec
    tools: list[ToolSpec]
    lease_seconds: float


class Description(_Frame):
    """`GET /ID`: the served env's spec as `envhub.spec(ID)` gives it there, without making the env."""

    spec: EnvSpec


class ResetDone(_Frame):
    type: Literal["reset_done"] = "reset_done"
    observation: list[Message]
    info: dict[str, Any]


class StepDone(_Frame):
    type: Literal["step_done"] = "step_done"
    observation: list[Message]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class ReferenceDone(_Frame):
    type: Literal["reference_done"] = "reference_done"
    action: Step | None


ErrorKind = Literal["infrastructure", "episode_state", "bad_request", "busy", "auth", "unknown_env", "lease"]


class Error(_Frame):
    """Something other than the agent went wrong; `kind` says whose fault, `message` what to do.

    `infrastructure`: the env raised (its sandbox died, a bug); `episode_state`: the caller stepped an
    episode never reset; `bad_request`: the frame could not be read; `busy`, `auth`, `unknown_env`,
    `lease`: the session was refused or reaped.
    """

    type: Literal["error"] = "error"
    kind: ErrorKind
    message: str


ServerFrame = Annotated[Hello | ResetDone | StepDone | ReferenceDone | Error, Field(discriminator="type")]
server_frame: TypeAdapter[Hello | ResetDone | StepDone | ReferenceDone | Error] = TypeAdapter(ServerFrame)
