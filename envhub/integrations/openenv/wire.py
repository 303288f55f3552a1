"""OpenEnv's wire protocol (package `openenv-core` 0.3), as pydantic models: both directions speak it.

An OpenEnv server takes one websocket per session at `BASE/ws`: the client sends `{"type": "reset",
"data": {...}}`, `{"type": "step", "data": ACTION}`, `{"type": "state"}` and `{"type": "close"}`; the
server answers `{"type": "observation", "data": {"observation": {...}, "reward": R, "done": D}}`,
`{"type": "state", "data": {...}}` or `{"type": "error", "data": {"message": M, "code": C}}`. `GET
BASE/schema` gives the JSON schemas of actions, observations and state. Written out here rather than
imported, so that neither `envhub serve` nor an `openenv:` env needs openenv-core installed; the tests
hold both sides to openenv-core's own client and server.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

# The error codes of openenv-core's `WSErrorCode`.
INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
"""The action (or a reset option) does not fit the server's schema: the sender's mistake."""
EXECUTION_ERROR = "EXECUTION_ERROR"
"""The env raised while answering: its machinery failed."""
CAPACITY_REACHED = "CAPACITY_REACHED"
FACTORY_ERROR = "FACTORY_ERROR"
SESSION_ERROR = "SESSION_ERROR"


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Client → server


class Reset(_Frame):
    type: Literal["reset"] = "reset"
    data: dict[str, Any] = Field(default_factory=dict)
    """`seed`, `episode_id` and whatever else the env's `reset` takes."""


class Step(_Frame):
    type: Literal["step"] = "step"
    data: dict[str, Any]
    """The action, as the server's action schema describes it."""


class State(_Frame):
    type: Literal["state"] = "state"


class Close(_Frame):
    type: Literal["close"] = "close"


ClientFrame = Annotated[Reset | Step | State | Close, Field(discriminator="type")]
client_frame: TypeAdapter[Reset | Step | State | Close] = TypeAdapter(ClientFrame)


# Server → client


class StepData(BaseModel):
    """What `reset` and `step` answer, on the websocket and over HTTP alike."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False


class ObservationFrame(_Frame):
    type: Literal["observation"] = "observation"
    data: StepData


class StateFrame(_Frame):
    type: Literal["state"] = "state"
    data: dict[str, Any]


class ErrorData(BaseModel):
    model_config = ConfigDict(extra="allow")  # openenv-core adds `errors`, `max_sessions`...

    message: str = ""
    code: str = "UNKNOWN"


class ErrorFrame(_Frame):
    type: Literal["error"] = "error"
    data: ErrorData

    @classmethod
    def of(cls, code: str, message: str, **extra: Any) -> ErrorFrame:
        return cls(data=ErrorData(message=message, code=code, **extra))


Reply = ObservationFrame | StateFrame | ErrorFrame
ServerFrame = Annotated[Reply, Field(discriminator="type")]
server_frame: TypeAdapter[Reply] = TypeAdapter(ServerFrame)


class Schemas(BaseModel):
    """`GET BASE/schema`: the JSON schemas of the env's actions, observations and state."""

    action: dict[str, Any]
    observation: dict[str, Any]
    state: dict[str, Any]


class ResetRequest(BaseModel):
    """`POST BASE/reset`'s body (openenv-core's `ResetRequest`): extra keys are reset options."""

    model_config = ConfigDict(extra="allow")

    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, max_length=255)


class StepRequest(BaseModel):
    """`POST BASE/step`'s body (openenv-core's `StepRequest`)."""

    model_config = ConfigDict(extra="allow")

    action: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = Field(default=None, max_length=255)


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """The errors of `exc` as JSON can carry them (pydantic's own may hold exceptions in `ctx`)."""
    return json.loads(exc.json(include_url=False))  # type: ignore[no-any-return]
