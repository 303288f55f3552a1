"""The tape's records: one call an episode made to the world outside its Python, and the whole recording.

Plain pydantic models in the contract layer, because an `Episode` carries its `Recording` (stored in its
`recording_json` column) and the store reads it back without the tape's machinery.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Json = Any
Kind = Literal["sandbox", "worker", "entropy", "tool"]


class RecordedCall(BaseModel):
    """One call and its answer: a result (`output`) or the exception it raised (`error`)."""

    model_config = ConfigDict(frozen=True)

    turn: int
    """0 for calls made by reset, k for those made by the k-th step (the final step scores the episode)."""
    scope: str = "env"
    """`env`, or `tool N` for the N-th tool call of the turn's message."""
    kind: Kind
    method: str
    """`exec`, `write_file`, `read_file`, `upload_dir`, `download`, `report`, `run` (a REPL snippet),
    `token_bytes`/`getrandbits` (entropy drawn in the open), `secret` (a derived grader secret: only its
    size and context are kept), or a tool's name."""
    input: Json = None
    output: Json = None
    error: dict[str, str] | None = None
    """`{"type": "FileNotFoundError", "message": ...}` when the call raised."""


class Recording(BaseModel):
    """What an episode recorded (`envhub.record.tape`), stored in its `recording_json` column."""

    model_config = ConfigDict(frozen=True)

    calls: list[RecordedCall] = Field(default_factory=list)
    salt: str = ""
    """Random per recording: with the user's recording key, what the grader's secrets are derived from
    (`envhub.record.seal.Secrets`), so that no secret is ever written into the recording."""
    mac: str | None = None
    """HMAC-SHA256 over the episode and this recording, keyed by the user's recording key
    (`envhub.record.seal`); a replay refuses a recording without one or with one that does not match."""

    def at_turn(self, turn: int) -> list[RecordedCall]:
        return [c for c in self.calls if c.turn == turn]
